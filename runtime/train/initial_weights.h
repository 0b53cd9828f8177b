// initial_weights.h: checkpoint.init_from: a fresh run's model weights from a safetensors file, a
// gtrain checkpoint or a Hugging Face directory, into any layout (each rank takes its part), with a
// fresh optimizer at step 0.
#pragma once

#include <cstdint>
#include <string>

namespace gtrain {

class Communicator;
class Model;
class ParallelEngine;

struct InitialWeights {
  std::string source;   // the file or checkpoint directory read
  int64_t tensors = 0;  // model tensors loaded (this rank's and the others')
  int64_t ignored = 0;  // optimizer-state tensors in the source, not read (the optimizer starts fresh)
  int64_t skipped = 0;  // a Hugging Face directory's buffers and a tied model's lm_head, not read
};

// Loads the weights `path` names (a .safetensors file, a checkpoint directory, a run / checkpoints
// directory: its newest checkpoint, or a Hugging Face model directory: hf_checkpoint.h) into `engine`. Every model
// tensor must be there with its global shape, and the file may hold no model tensor that no rank has (optimizer state
// in it is ignored); otherwise ConfigError naming checkpoint.init_from, the file and each tensor (the first few). Call
// on every rank (one collective when there are several).
InitialWeights load_initial_weights(ParallelEngine& engine, Communicator& comm, const std::string& path);

// LoRA: the frozen base parameters (ParallelEngine::frozen_parameters) from `path`, as above; the
// adapters keep their initial values. Called on a fresh start and on every resume (checkpoints hold
// the adapters only).
InitialWeights load_frozen_base(ParallelEngine& engine, Communicator& comm, const std::string& path);

// A whole model's parameters on this rank (distillation's teacher: no engine, no optimizer) from
// `path` as above; ConfigError naming `key` when a tensor is missing, has another shape, or is not
// the model's. Not a collective.
InitialWeights load_model_weights(Model& model, const std::string& path, const char* key);

// The identity of the base model a LoRA run adapts (or of distillation's teacher):
// "crc32c:<hex>:<bytes>" over the file (or a directory's .safetensors, .json and .bin files, by
// name). A checkpoint records it; a resume whose base hashes otherwise is refused. `key` names the
// config key in errors.
std::string base_model_hash(const std::string& path, const char* key = "checkpoint.init_from");
// The same, read by rank 0 only and broadcast (a collective: an 8B base is 16 GB a rank to read).
std::string base_model_hash(Communicator& comm, const std::string& path, const char* key = "checkpoint.init_from");

}  // namespace gtrain
