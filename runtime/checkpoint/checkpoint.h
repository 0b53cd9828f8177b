// checkpoint.h: checkpoints that reshard: every rank writes the pieces of state it holds
// (TensorShard: a region of a global tensor, or a flat range of it) into its own data file, with a
// CRC-32C per piece; rank 0 commits a manifest once every rank is done. Loading assembles any global
// tensor from the pieces, so a checkpoint written by one dp/tp/pp/ZeRO layout loads into any other.
//
// Directory layout:  <dir>/step_<NNNNNNNN>/manifest.json, shard_<rank>.bin
//                    <dir>/superseded-<UTC time>/step_<NNNNNNNN>/  (another trajectory's, moved aside)
// Commit protocol (no collective, so it can run in a background thread):
//  1. every rank writes shard_<r>.bin into <dir>/step_<N>.tmp-<token>/, fsyncs it, then publishes
//     shard_<r>.json (its pieces: name, global shape, region, flat range, byte range, crc32c) by an
//     atomic rename;
//  2. rank 0 waits for all shard_<r>.json, writes manifest.json (+ fsync), renames the directory
//     to step_<N> (atomic), fsyncs the parent, and only then deletes checkpoints older than step N
//     beyond `keep` (each renamed to a *.tmp-* name first, then deleted).
// A crash at any point leaves either the previous checkpoints or a complete new one; *.tmp-*
// directories, and step_* directories without a manifest, are ignored and cleaned up.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/staging_buffer.h"
#include "runtime/checkpoint/tensor_shard.h"
#include "runtime/core/checkpoint_dirs.h"  // find_latest_complete_checkpoint
#include "runtime/core/checkpoint_manifest.h"

namespace gtrain {

struct CheckpointInfo {
  std::string path;
  int64_t step = 0;              // optimizer steps completed
  int64_t consumed_samples = 0;  // global sample index of the next sample
};

// Whether a checkpoint tensor is optimizer state rather than the model's: "optimizer.*", and
// "<tensor>.exp_avg", ".exp_avg_sq" or ".momentum_buffer" of another tensor in `names`.
bool is_optimizer_state(const std::string& name, const std::vector<std::string>& names);

// Committed checkpoints in `dir` (manifest present), oldest first.
std::vector<CheckpointInfo> list_checkpoints(const std::string& dir);

struct SaveRequest {
  std::string dir;  // checkpoint root
  int64_t step = 0;
  int64_t consumed_samples = 0;
  CheckpointMeta meta;              // rank 0: job facts stored in the manifest (plan, probe loss, ...)
  std::vector<TensorShard> shards;  // this rank's pieces (only those with write = true are written)
  int rank = 0, world = 1;
  int64_t keep = 2;
  std::string token;              // same on every rank of a job: names the temporary directory
  double commit_timeout_s = 600;  // rank 0 waits this long for the other ranks' files
  // Rank 0, when set: the probe loss arrives after the save (the next step's training loss); the
  // manifest waits for it. A broken promise fails the save (nothing is committed).
  std::shared_future<double> probe;
  // Async: CPU shards are copied by the writer thread, not by save(), while training goes on; the
  // caller must call release_sources() before it changes them (the next optimizer step).
  bool live_sources = false;
};

class CheckpointWriter {
 public:
  explicit CheckpointWriter(bool async);
  ~CheckpointWriter();
  // Waits for the previous save (one in flight at most), copies the shards to host memory, then
  // writes them (in the background when async). Returns the seconds training was stalled.
  double save(SaveRequest request);
  // Async: maps `bytes` of staging memory on the writer thread (the next save waits for it, and
  // reports its failure), so the first save does not pay for fresh pages. Synchronous: nothing.
  void prepare(size_t bytes);
  // Until the last save is written (and committed, on rank 0). Rethrows a failed save's error.
  void wait();
  // Rethrows a background save's error as soon as it failed (the trainer asks every step), so a
  // full disk ends the stage now, not at the next save.
  void rethrow_if_failed();
  // Until the save in flight no longer reads live tensors (SaveRequest::live_sources): training may
  // change them then. Returns the seconds it waited.
  double release_sources();
  double last_write_seconds() const { return last_write_s_.load(); }
  int64_t last_bytes() const { return last_bytes_.load(); }

 private:
  void write(SaveRequest& r);
  void write_into(SaveRequest& r, const std::filesystem::path& tmp);
  void sources_released();
  bool reading_live();
  bool async_;
  // This rank's shard state, laid out as its data file: every save copies into it (device
  // tensors in save(), CPU tensors in save() or, live, on the writer thread) and writes it from
  // there. Kept between saves: a second copy of the state in host memory, as every async
  // checkpointer keeps one.
  StagingBuffer staging_;
  std::thread thread_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};  // error_ is set (read without joining the writer)
  std::mutex reading_mu_;
  std::condition_variable reading_cv_;
  bool reading_ = false;  // the writer reads live tensors (under reading_mu_)
  std::atomic<double> last_write_s_{0};
  std::atomic<int64_t> last_bytes_{0};
};

// Writes synchronously (tests, tools).
CheckpointInfo write_checkpoint(SaveRequest request);

// A committed checkpoint opened for reading.
class CheckpointReader {
 public:
  // Reads and checks the manifest (every key the readers use, with its type); throws CheckpointError
  // naming the file and the key.
  explicit CheckpointReader(const std::string& path);
  const CheckpointManifest& manifest() const { return manifest_; }
  int64_t step() const { return manifest_.step; }
  int64_t consumed_samples() const { return manifest_.consumed_samples; }
  std::vector<std::string> tensor_names() const;
  bool has(const std::string& name) const;
  // The stored dtype and global shape of a tensor (from the manifest, checked when it was opened).
  torch::ScalarType dtype(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;
  // Assembles the global tensor from its pieces, checking each piece's CRC-32C.
  torch::Tensor read(const std::string& name) const;
  GlobalTensorReader reader() const {
    return [this](const std::string& n) { return read(n); };
  }
  // Checks every piece of every tensor (sizes, CRC-32C, full coverage). Returns problems, one a line.
  std::vector<std::string> verify() const;
  // Checks that every piece's data file exists and has the size the pieces add up to (no
  // checksums). Returns problems, one a line.
  std::vector<std::string> check_files() const;
  const std::string& path() const { return path_; }

 private:
  const ManifestTensor& entry(const std::string& name) const;  // the manifest's entry; throws when absent
  std::string path_;
  CheckpointManifest manifest_;
};

// The newest checkpoint in `dir` that opens and verifies; a bad one is skipped with a warning
// naming the file (written to `warnings`). Returns "" when there is none.
std::string find_latest_valid_checkpoint(const std::string& dir, std::vector<std::string>* warnings);

struct SupersededCheckpoints {
  std::vector<int64_t> steps;  // the steps moved aside, oldest first (empty: nothing moved)
  std::string folder;          // where they went
};

// Moves every committed checkpoint in `dir` with a step above `resume_step` (every one when
// resume_step < 0), except `keep_path`, into <dir>/superseded-<UTC yyyymmdd-HHMMSS>/: a run that
// starts over or resumes from an older checkpoint must not prune its own new checkpoints in favour
// of the old trajectory's, nor resume the old trajectory later. Nothing is deleted.
SupersededCheckpoints supersede_checkpoints(const std::string& dir, int64_t resume_step,
                                            const std::string& keep_path = "");

}  // namespace gtrain
