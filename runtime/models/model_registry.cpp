// model_registry.cpp: the model registry and plugin loading.
#include "runtime/models/model_registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>

#include <torch/version.h>

#include "runtime/common/elf_needed.h"
#include "runtime/core/config/schema.h"
#include "runtime/core/errors.h"

namespace gtrain {

ModelRegistry& ModelRegistry::global() {
  static ModelRegistry* reg = [] {
    auto* r = new ModelRegistry();
    register_builtin_models(*r);
    return r;
  }();
  return *reg;
}

void ModelRegistry::add(const std::string& name, ModelFactory factory) {
  std::lock_guard<std::mutex> lock(mu_);
  if (name.empty() || !factory) throw ConfigError("model registry: a model needs a name and a factory");
  // A second model of the same name (a plugin's "mlp") would silently train instead of the first.
  if (factories_.count(name)) {
    throw ConfigError("model registry: '" + name + "' is already a registered model",
                      "give the new one a name of its own");
  }
  factories_[name] = std::move(factory);
}

bool ModelRegistry::has(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return factories_.count(name) > 0;
}

std::vector<std::string> ModelRegistry::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& kv : factories_) out.push_back(kv.first);
  return out;
}

std::shared_ptr<Model> ModelRegistry::create(const ModelConfig& config, const DataSpec& spec) const {
  ModelFactory f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = factories_.find(config.name);
    if (it != factories_.end()) f = it->second;
  }
  if (!f) {
    auto all = names();
    std::string list;
    for (const auto& n : all) list += (list.empty() ? "" : ", ") + n;
    std::string near = cfg::closest_match(config.name, all);
    throw ConfigError("model.name: unknown model '" + config.name + "'" +
                      (near.empty() ? "" : "; did you mean '" + near + "'?") + " (registered: " + list +
                      (config.plugin.empty() ? "; a plugin library adds more via model.plugin)" : ")"));
  }
  const std::string which = "model.name = '" + config.name + "'" +
                            (config.plugin.empty() ? std::string() : " (model.plugin '" + config.plugin + "')");
  std::shared_ptr<Model> model;
  try {
    model = f(config, spec);
  } catch (const Error&) {
    throw;  // gtrain's own errors already say what is wrong
  } catch (const std::exception& e) {
    // A plugin's or LibTorch's exception: name the model (and the plugin) it came from.
    throw ConfigError(which + ": building the model failed: " + first_line(e.what()));
  } catch (...) {
    throw ConfigError(which + ": building the model failed: its factory threw something other than an exception");
  }
  if (!model) throw ConfigError(which + ": building the model failed: its factory returned no model (nullptr)");
  return model;
}

namespace {

// A plugin built against another LibTorch than the one this process runs crashes inside dlopen (its
// LibTorch's static initialisers register operators with ours), so its NEEDED LibTorch libraries
// are compared with those loaded here first, from the file.
void check_plugin_libtorch(const std::string& path, const std::string& file) {
  std::vector<std::string> needed;
  try {
    needed = elf_needed_libraries(file);
  } catch (const std::exception&) {
    return;  // not an ELF file we can read: dlopen's own error names the problem
  }
  const auto loaded = loaded_library_names();
  for (const auto& lib : needed) {
    if (lib.rfind("libtorch", 0) != 0 && lib.rfind("libc10", 0) != 0) continue;
    if (std::find(loaded.begin(), loaded.end(), lib) != loaded.end()) continue;
    std::string ours;
    for (const auto& l : loaded) {
      if (l.rfind("libtorch_cpu", 0) == 0) ours = l;
    }
    throw ConfigError("model.plugin: '" + path + "' links " + lib + ", a LibTorch this gtrain does not run (it runs " +
                          (ours.empty() ? std::string("another one") : ours) + ", LibTorch " TORCH_VERSION ")",
                      "rebuild the plugin against gtrain's build tree: cmake -S <plugin> -B <dir> "
                      "-DGTRAIN_BUILD_DIR=<gtrain's build> (examples/custom_model/CMakeLists.txt)");
  }
}

}  // namespace

void ModelRegistry::load_plugin(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::find(loaded_plugins_.begin(), loaded_plugins_.end(), path) != loaded_plugins_.end()) return;
  }
  // A name without a '/' that names a file here means that file (as every other path in the
  // config does), not a search of the library path, which dlopen would do.
  std::error_code ec;
  const std::string file =
      path.find('/') == std::string::npos && std::filesystem::is_regular_file(path, ec) ? "./" + path : path;
  check_plugin_libtorch(path, file);
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    throw ConfigError("model.plugin: cannot load '" + path + "': " + (err ? err : "unknown dlopen error"),
                      "check the path in model.plugin, and that the libraries it needs are found (ldd lists them)");
  }
  {
    // The same library under another spelling of its path: its models are registered already.
    std::lock_guard<std::mutex> lock(mu_);
    if (std::find(loaded_handles_.begin(), loaded_handles_.end(), handle) != loaded_handles_.end()) {
      loaded_plugins_.push_back(path);
      return;
    }
  }
  using Entry = void (*)(ModelRegistry&);
  auto entry = reinterpret_cast<Entry>(dlsym(handle, GTRAIN_PLUGIN_ENTRY_NAME));
  if (!entry) {
    throw ConfigError("model.plugin: '" + path + "' has no " GTRAIN_PLUGIN_ENTRY_NAME " entry point",
                      "define it with GTRAIN_PLUGIN_ENTRY");
  }
  try {
    entry(*this);
  } catch (const std::exception& e) {
    throw ConfigError("model.plugin: '" + path + "': its " GTRAIN_PLUGIN_ENTRY_NAME " failed: " + first_line(e.what()));
  } catch (...) {
    throw ConfigError("model.plugin: '" + path +
                      "': its " GTRAIN_PLUGIN_ENTRY_NAME " failed: it threw something other than an exception");
  }
  std::lock_guard<std::mutex> lock(mu_);
  loaded_plugins_.push_back(path);
  loaded_handles_.push_back(handle);
}

}  // namespace gtrain
