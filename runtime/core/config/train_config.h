// train_config.h: the [train] section: batch, length, seed, LR schedule, clipping, evaluation.
#pragma once

#include <cstdint>
#include <string>

#include <array>

#include "runtime/core/config/enum_names.h"
#include "runtime/core/config/schema.h"

namespace gtrain {

// train.lr_schedule: the decay after warmup.
enum class LrSchedule { cosine, linear, constant };
constexpr std::array<EnumName<LrSchedule>, 3> enum_names(LrSchedule) {
  return {{{LrSchedule::cosine, "cosine"}, {LrSchedule::linear, "linear"}, {LrSchedule::constant, "constant"}}};
}

// train.device: where each rank computes ("auto": its granted GPU when there is one, else the CPU).
enum class DeviceRequest { automatic, cpu, cuda };
constexpr std::array<EnumName<DeviceRequest>, 3> enum_names(DeviceRequest) {
  return {{{DeviceRequest::automatic, "auto"}, {DeviceRequest::cpu, "cpu"}, {DeviceRequest::cuda, "cuda"}}};
}

// train.fused_loss: gpt's output layer + cross-entropy in row blocks ("auto": on for CUDA ranks).
enum class FusedLoss { automatic, on, off };
constexpr std::array<EnumName<FusedLoss>, 3> enum_names(FusedLoss) {
  return {{{FusedLoss::automatic, "auto"}, {FusedLoss::on, "on"}, {FusedLoss::off, "off"}}};
}
// Whether the fused loss is used on a rank that computes on a GPU (`gpu`) or not.
constexpr bool fused_loss_enabled(FusedLoss mode, bool gpu) {
  return mode == FusedLoss::on || (mode == FusedLoss::automatic && gpu);
}

// train.reproducible: "bitwise" makes the trajectory independent of the layout (strategies/reproducible.h).
enum class Reproducible { off, bitwise };
constexpr std::array<EnumName<Reproducible>, 2> enum_names(Reproducible) {
  return {{{Reproducible::off, "off"}, {Reproducible::bitwise, "bitwise"}}};
}

struct TrainConfig {
  int64_t global_batch = 64;                        // samples per optimizer step, summed over ranks and micro-batches
  int64_t steps = 0;                                // optimizer steps (exactly one of steps/epochs/tokens is set)
  double epochs = 0.0;                              // passes over the training split
  int64_t tokens = 0;                               // training tokens (token models)
  int64_t seed = 1234;                              // seeds init, data order and dropout
  int64_t warmup_steps = 0;                         // linear LR warmup
  LrSchedule lr_schedule = LrSchedule::cosine;      // cosine | linear | constant (after warmup)
  double min_lr_ratio = 0.1;                        // final LR as a fraction of the peak (cosine, linear)
  double grad_clip = 1.0;                           // max global gradient L2 norm (0 = off)
  int64_t eval_interval = 0;                        // steps between evaluations (0 = only at the end)
  int64_t eval_batches = 0;                         // cap on eval batches of global_batch samples (0 = whole split)
  int64_t threads = 0;                              // torch intra-op threads per rank (0 = measured at start)
  bool deterministic = true;                        // use deterministic algorithms where the backend has them
  DeviceRequest device = DeviceRequest::automatic;  // auto | cpu | cuda: where each rank computes
  FusedLoss fused_loss = FusedLoss::automatic;      // auto | on | off: gpt output layer + cross-entropy in row blocks
  Reproducible reproducible = Reproducible::off;    // off | bitwise: the same bits on any layout
  int64_t reproducible_chunk = 0;                   // bitwise: samples per chunk (0 = the planner chooses, once)

  template <class V>
  void visit(V& v) {
    v("global_batch", global_batch,
      "Samples per optimizer step, summed over all ranks and micro-batches; "
      "kept exactly on any number of GPUs.",
      cfg::at_least(1));
    v("steps", steps, "Optimizer steps to train. Exactly one of steps, epochs, tokens is non-zero.", cfg::at_least(0));
    v("epochs", epochs, "Passes over the training split (rounded up to whole steps).", cfg::at_least(0.0));
    v("tokens", tokens, "Training tokens for token models (rounded up to whole steps).", cfg::at_least(0));
    v("seed", seed, "Seed of initialisation, data order and dropout; same seed, same run.", cfg::at_least(0));
    v("warmup_steps", warmup_steps,
      "Steps of linear learning-rate warmup: step k (from 1) of the first warmup_steps uses learning_rate x "
      "k / warmup_steps, so the first step already trains and the last warmup step reaches the peak (as "
      "nanoGPT); the decay then starts from the peak and ends at min_lr_ratio x learning_rate on the last step.",
      cfg::at_least(0));
    v("lr_schedule", lr_schedule, "Decay after warmup: \"cosine\", \"linear\" or \"constant\".");
    v("min_lr_ratio", min_lr_ratio, "Final learning rate as a fraction of the peak (cosine, linear).",
      cfg::range(0.0, 1.0));
    v("grad_clip", grad_clip, "Clip the global gradient L2 norm to this value (0 = no clipping).", cfg::at_least(0.0));
    v("eval_interval", eval_interval, "Steps between evaluations on the held-out split (0 = only at the end).",
      cfg::at_least(0));
    v("eval_batches", eval_batches, "At most this many eval batches of global_batch samples (0 = whole split).",
      cfg::at_least(0));
    v("threads", threads,
      "Torch intra-op threads per rank (0 = CPU ranks run their first steps at 1, 2, 4, ... threads up to the "
      "cores per rank and keep the fastest; CUDA ranks take the cores per rank).",
      cfg::range(0, 1024));
    v("deterministic", deterministic, "Use deterministic algorithms where the backend offers them.");
    v("device", device,
      "Where each rank computes: \"auto\" (its granted CUDA GPU when this build has CUDA and one "
      "is visible, else the CPU), \"cpu\", or \"cuda\" (an error when there is no GPU).");
    v("fused_loss", fused_loss,
      "gpt training loss: output layer and cross-entropy computed a block of rows at a "
      "time, so the [tokens, vocab] logits and their fp32 copy never exist whole: \"on\", \"off\", or \"auto\" "
      "(on for CUDA ranks without tensor parallelism; CPU keeps the plain layer).");
    v("reproducible", reproducible,
      "\"bitwise\": per-step losses, gradients and weights bitwise identical whatever the data-parallel size, "
      "ZeRO stage, pipeline split, accumulation and number of stages, on the same hardware type and build "
      "(tensor parallelism is not planned; CPU ranks keep train.threads, 1 when 0). \"off\": the fastest sums, "
      "equal to a few ulps. See docs/stages-and-checkpoints.md.");
    v("reproducible_chunk", reproducible_chunk,
      "Bitwise mode: samples per chunk, the fixed unit every micro-batch is made of (it must divide "
      "global_batch). 0 = the planner chooses it at the first stage; checkpoints record it and later stages "
      "keep it.",
      cfg::at_least(0));
  }
};

}  // namespace gtrain
