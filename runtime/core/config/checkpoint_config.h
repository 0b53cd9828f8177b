// checkpoint_config.h: the [checkpoint] section: where and how often to save.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/config/schema.h"

namespace gtrain {

struct CheckpointConfig {
  std::string dir;                // "" = <run dir>/checkpoints
  int64_t interval = 0;           // steps between saves (0 = only at the end)
  int64_t keep = 2;               // newest checkpoints kept on disk
  bool at_end = true;             // save when training finishes
  bool async = true;              // write in a background thread while training continues
  double probe_tolerance = 1e-4;  // relative: probe loss after resume vs at save
  std::string init_from;          // weights a fresh start begins from: safetensors, checkpoint, HF dir ("" = init)

  template <class V>
  void visit(V& v) {
    v("dir", dir, "Checkpoint directory (\"\" = <run dir>/checkpoints).");
    v("interval", interval, "Steps between checkpoints (0 = only at the end).", cfg::at_least(0));
    v("keep", keep, "Newest checkpoints kept; older ones are deleted after a newer one is complete.", cfg::at_least(1));
    v("at_end", at_end,
      "Save a checkpoint when training finishes (false: the final weights are not saved, and a start "
      "after completion trains the steps after the last interval checkpoint again).");
    v("async", async,
      "Write checkpoints in a background thread while training continues (at most one save in flight). "
      "An interval save copies the state into host staging memory (kept between saves: one more copy of "
      "each rank's shard) beside the next step's forward and backward, and takes its probe loss from "
      "that step, so training hardly stalls; false: training waits for each save.");
    v("probe_tolerance", probe_tolerance,
      "Relative difference allowed between a probe batch's loss at save (an async interval save: the "
      "next step's training loss; otherwise a fixed batch's) and after loading (any layout); larger stops "
      "the run: the resume would be silently wrong.",
      cfg::greater_than(0.0));
    v("init_from", init_from,
      "Weights a fresh start begins from (fine-tuning): a .safetensors file (gtrain ckpt export's, or any "
      "with gtrain's tensor names and shapes), a checkpoint directory, a run directory (its newest "
      "checkpoint), or a Hugging Face model directory (config.json with model.safetensors or shards and "
      "model.safetensors.index.json; GPT-2, Llama, Qwen2, Qwen3; bf16, fp16 or fp32, read as fp32): its "
      "config.json gives the [model] keys the file leaves out (model.name = \"hf\": all of them) and must "
      "agree with those it sets. Every model tensor must be there with its shape, in a floating-point type, and "
      "no other model's tensor; optimizer state in it is ignored (the run says how many tensors): the optimizer "
      "starts fresh at step 0. Ignored when the run resumes from its own checkpoint (\"\" = the model's "
      "own initialisation).");
  }
};

}  // namespace gtrain
