// ckpt_commands.cpp: checkpoint tools that read the tensors: every piece's checksum, the model's
// weights exported to one safetensors file.
#include "launcher/commands/ckpt_commands.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/crc32c.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace fs = std::filesystem;

namespace gtrain {
int ckpt_verify_command(const std::string& path, bool all) {
  const std::string newest = resolve_checkpoint_path(path);
  // --all: every committed checkpoint beside the newest (the run's kept ones), oldest first.
  std::vector<std::string> paths;
  const fs::path root = fs::path(newest).parent_path();
  if (all) {
    for (const auto& [step, dir] : committed_checkpoint_dirs(root.string())) paths.push_back(dir.string());
  } else {
    paths.push_back(newest);
  }
  size_t failed = 0;
  for (const auto& p : paths) {
    std::vector<std::string> problems;
    size_t tensors = 0;
    const auto check = [&] {
      CheckpointReader ck(p);
      problems = ck.verify();
      tensors = ck.tensor_names().size();
    };
    if (!all) {
      check();  // one checkpoint: a manifest that does not open is the command's error
    } else {
      try {  // several: a manifest that does not open is that checkpoint's problem; the others go on
        check();
      } catch (const Error& e) {
        problems.push_back(first_line(e.what()));
      }
    }
    for (const auto& line : problems) std::printf("%s\n", line.c_str());
    if (problems.empty()) {
      std::printf("%s: OK (%zu tensors, every checksum matches)\n", p.c_str(), tensors);
    } else {
      ++failed;
      std::printf("%s: FAILED (%zu problem%s)\n", p.c_str(), problems.size(), problems.size() == 1 ? "" : "s");
    }
  }
  if (all) {
    std::printf("%zu checkpoint%s in %s: %zu passed, %zu failed\n", paths.size(), paths.size() == 1 ? "" : "s",
                root.c_str(), paths.size() - failed, failed);
  }
  return failed == 0 ? 0 : 1;
}

namespace {

// The file `out_arg` (OUT) names for the export: through a symlink (a dangling one too) to its target;
// only a regular file, or nothing, is replaced, in a folder that exists.
fs::path safetensors_target(const std::string& out_arg) {
  if (out_arg.empty()) throw ConfigError("OUT: expected the path of the .safetensors file to write, got ''");
  std::error_code ec;
  fs::path out(out_arg);
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(out, ec)); ++hops) {
    const fs::path target = fs::read_symlink(out, ec);
    out = target.is_absolute() ? target : out.parent_path() / target;
  }
  const auto st = fs::status(out, ec);
  if (fs::is_directory(st)) throw ConfigError(out_arg + ": is a directory", "give the .safetensors file to write");
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw ConfigError(out_arg + ": is not a regular file (a device, FIFO or socket)",
                      "give the .safetensors file to write");
  const fs::path folder = out.has_parent_path() ? out.parent_path() : fs::path(".");
  if (!fs::is_directory(folder, ec)) {
    throw ConfigError(str(out_arg, ": folder ", folder.string(), " does not exist"),
                      "create the folder first, or give a path in an existing one");
  }
  return out;
}

}  // namespace

c10::ScalarType parse_export_dtype(const std::string& text) {
  if (text == "stored" || text == "fp32" || text == "float32") return torch::kFloat32;
  if (text == "bf16" || text == "bfloat16") return torch::kBFloat16;
  if (text == "fp16" || text == "float16") return torch::kFloat16;
  throw ConfigError("--dtype: '" + text +
                    "' is not one of stored, float32, bfloat16, float16 (or fp32, bf16, fp16 as precision.dtype "
                    "spells them)");
}

const char* export_dtype_name(c10::ScalarType dtype) {
  return dtype == torch::kBFloat16 ? "bfloat16" : dtype == torch::kFloat16 ? "float16" : "float32";
}

int ckpt_export_command(const CkptExportOptions& o) {
  if (o.format == "peft") return ckpt_export_peft_command(o);
  if (o.format == "hf" && o.merge) return ckpt_export_merged_command(o);
  if (o.merge) throw ConfigError("--merge: goes with --format hf (the merged model as a Hugging Face directory)");
  if (o.format == "hf") return ckpt_export_hf_command(o);
  if (o.format != "safetensors") throw ConfigError("--format: '" + o.format + "' is not one of safetensors, hf, peft");
  const bool stored = o.dtype == "stored";
  const torch::ScalarType cast = parse_export_dtype(o.dtype);
  const std::string dtype = export_dtype_name(cast);
  const fs::path out = safetensors_target(o.out);
  std::error_code ec;
  CheckpointReader ck(resolve_checkpoint_path(o.path));
  {
    const std::string inside = fs::weakly_canonical(ck.path(), ec).string() + "/";
    if (fs::weakly_canonical(out, ec).string().rfind(inside, 0) == 0)
      throw ConfigError(str(o.out, ": is inside the checkpoint it exports (", ck.path(), ")"), "write it elsewhere");
  }
  const auto names = ck.tensor_names();
  std::vector<SafetensorsSpec> specs;
  int64_t skipped = 0;
  for (const auto& name : names) {
    if (!o.optimizer && is_optimizer_state(name, names)) {
      ++skipped;
      continue;
    }
    SafetensorsSpec s;
    s.name = name;
    s.shape = ck.shape(name);
    // Floating tensors take --dtype; others (the step count) stay as they are.
    const torch::ScalarType held = ck.dtype(name);
    s.dtype = (!stored && c10::isFloatingType(held)) ? cast : held;
    specs.push_back(std::move(s));
  }
  const std::string inspect = str("gtrain ckpt inspect ", ck.path(), " shows what it holds");
  if (specs.empty()) throw CheckpointError(ck.path() + ": holds no model tensors to export", inspect);
  const nlohmann::json model = manifest_model_json(ck.manifest().meta.model);
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"gtrain_checkpoint", ck.path()},
                                             {"gtrain_step", std::to_string(ck.step())},
                                             {"gtrain_model", model.dump()},
                                             {"gtrain_plan", ck.manifest().meta.plan.value_or("")}};
  std::vector<uint32_t> crcs(specs.size());
  int64_t overflowed = 0;  // finite values a float16 cast made infinite
  const int64_t bytes = write_safetensors(out.string(), specs, meta, [&](size_t i) {
    torch::Tensor t = ck.read(specs[i].name);  // pieces checked against their CRC-32C
    if (t.scalar_type() != specs[i].dtype) {
      const torch::Tensor held = t;
      t = t.to(specs[i].dtype);
      if (specs[i].dtype == torch::kFloat16)
        overflowed += (torch::isfinite(held) & ~torch::isfinite(t)).sum().item<int64_t>();
    }
    t = t.contiguous();
    crcs[i] = crc32c(t.data_ptr(), t.nbytes());
    return t;
  });
  // Read back: every tensor's bytes as written, so the file is the checkpoint's model.
  SafetensorsReader back(out.string());
  for (size_t i = 0; i < specs.size(); ++i) {
    const torch::Tensor t = back.has(specs[i].name) ? back.read(specs[i].name) : torch::Tensor();
    if (!t.defined() || t.scalar_type() != specs[i].dtype || crc32c(t.data_ptr(), t.nbytes()) != crcs[i])
      throw CheckpointError(str(o.out, ": tensor '", specs[i].name, "' reads back different from what was written"),
                            "check the disk and file system holding it, then run gtrain ckpt export again");
  }
  if (overflowed > 0)
    std::fprintf(stderr,
                 "gtrain: warning: %lld values lie beyond float16's range (65504) and were written as inf; "
                 "--dtype bfloat16 or stored keeps them\n",
                 (long long)overflowed);
  std::printf(
      "%s: %zu tensors (%s%s), %.2f MB, from %s (step %lld)%s\n", o.out.c_str(), specs.size(),
      stored ? "as stored" : dtype.c_str(), o.optimizer ? ", optimizer state included" : "", bytes / 1e6,
      ck.path().c_str(), (long long)ck.step(),
      skipped ? (", " + std::to_string(skipped) + " optimizer tensors left out (--optimizer keeps them)").c_str() : "");
  return 0;
}

}  // namespace gtrain
