// ckpt_commands.h: `gtrain ckpt verify|export PATH`, which read a checkpoint's tensors with LibTorch's
// reader (gtrain-worker runs them; ckpt inspect: stage_commands.h).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace gtrain {

class CheckpointReader;
struct ModelConfig;

// Verifies the checkpoint `path` names (its newest), or with `all` every committed checkpoint in its
// directory; problems one line each (a damaged data file is one line), exit 1 when any fails.
int ckpt_verify_command(const std::string& path, bool all = false);

struct CkptExportOptions {
  std::string path;                    // checkpoint (or run / checkpoints directory: the newest)
  std::string out;                     // the .safetensors file to write
  std::string dtype = "stored";        // stored (the checkpoint's: fp32 master weights), float32, bfloat16, float16;
                                       // or fp32, bf16, fp16 as precision.dtype spells them
  bool optimizer = false;              // also the optimizer's state (exp_avg, exp_avg_sq, momentum_buffer, step)
  std::string format = "safetensors";  // safetensors (one file, gtrain's names) or hf (a Hugging Face directory)
  std::string max_shard_size = "5GB";  // hf: tensor bytes per shard file (B, KB, MB, GB, KiB, MiB, GiB)
  bool merge = false;                  // hf of a LoRA checkpoint: the base with the adapters folded in
};
// Writes the checkpoint's full (unsharded) model tensors to one safetensors file, whatever layout
// wrote them, read back and checked before it says so.
int ckpt_export_command(const CkptExportOptions& o);
// --format hf: the checkpoint's gpt or llama model as a Hugging Face directory (hf_export.cpp).
int ckpt_export_hf_command(const CkptExportOptions& o);
// A LoRA run's checkpoint (lora_export.cpp): --format peft, the adapters as PEFT writes them; --format
// hf --merge, the base with the adapters folded in.
int ckpt_export_peft_command(const CkptExportOptions& o);
// Shared by the Hugging Face exports (hf_export.cpp): --max-shard-size in bytes; a checkpoint's
// [model] section as a ModelConfig.
int64_t parse_shard_size(const std::string& text);
// --dtype: stored (the checkpoint's fp32 master weights: float32), float32, bfloat16, float16, or
// precision.dtype's fp32, bf16, fp16; a ConfigError naming the flag otherwise.
c10::ScalarType parse_export_dtype(const std::string& text);
// "float32", "bfloat16" or "float16": how export prints the dtype it wrote.
const char* export_dtype_name(c10::ScalarType dtype);
ModelConfig manifest_model(const CheckpointReader& ck);
int ckpt_export_merged_command(const CkptExportOptions& o);

}  // namespace gtrain
