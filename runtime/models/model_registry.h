// model_registry.h: name -> factory for models; built-ins plus those a plugin library registers.
//
// A plugin is a shared library that links gtrain_runtime and defines
//   GTRAIN_PLUGIN_ENTRY(registry) { registry.add("my_model", factory); }
// and is named by model.plugin in the config.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/models/model.h"

namespace gtrain {

using ModelFactory = std::function<std::shared_ptr<Model>(const ModelConfig&, const DataSpec&)>;

class ModelRegistry {
 public:
  // The process-wide registry, with the built-in models already added.
  static ModelRegistry& global();

  // Adds a model; a name already registered (a built-in's, say) is a ConfigError, never a silent replacement.
  void add(const std::string& name, ModelFactory factory);
  bool has(const std::string& name) const;
  std::vector<std::string> names() const;

  // Builds config.name; an unknown name is a ConfigError listing the registered ones.
  std::shared_ptr<Model> create(const ModelConfig& config, const DataSpec& spec) const;

  // dlopen()s a plugin and calls its entry point; errors name the path and dlerror().
  void load_plugin(const std::string& path);

 private:
  mutable std::mutex mu_;
  std::map<std::string, ModelFactory> factories_;
  std::vector<std::string> loaded_plugins_;
  std::vector<void*> loaded_handles_;  // dlopen handles: one library, however its path is spelt
};

void register_builtin_models(ModelRegistry& registry);

}  // namespace gtrain

#define GTRAIN_PLUGIN_ENTRY_NAME "gtrain_register_models"
#define GTRAIN_PLUGIN_ENTRY(registry) \
  extern "C" __attribute__((visibility("default"))) void gtrain_register_models(::gtrain::ModelRegistry& registry)
