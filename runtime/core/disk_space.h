// disk_space.h: a full disk said plainly: which writer needed the space, what holds it (the run's
// checkpoints and checkpoint.keep), and a small reserve so a stage's records can still be written.
#pragma once

#include <cstdint>
#include <string>

namespace gtrain {

// Where a run keeps its bulk, for the hint of a full disk (set by the trainer at start).
struct DiskUsageContext {
  std::string run_dir;         // the run directory ("" = unknown)
  std::string checkpoint_dir;  // its checkpoints ("" = unknown)
  int64_t keep = 0;            // checkpoint.keep (0 = unknown)
};
void set_disk_usage_context(const DiskUsageContext& c);

// What holds the space of `path`'s disk: "N checkpoints in DIR hold X (checkpoint.keep = K), Y free
// on its file system; lower checkpoint.keep, move checkpoint.dir to a larger disk or free space".
std::string disk_space_hint(const std::string& path);

// Throws DiskFullError ("PATH: No space left on device while writing WRITER") when `err` is one a
// retry would meet again (ENOSPC, EDQUOT, EROFS); returns otherwise, for the caller's own error.
void throw_if_disk_full(const std::string& path, int err, const std::string& writer);

// The room kept for a stage's records: kDiskReserveBytes in <run_dir>/.disk-reserve, made when a
// stage starts and released before the launcher writes its records (or by a rank that found the
// disk full, before it says so), so stages.jsonl still gets its line on a full disk.
inline constexpr int64_t kDiskReserveBytes = 1 << 20;
inline constexpr const char* kDiskReserveFile = ".disk-reserve";
void make_disk_reserve(const std::string& run_dir);
bool release_disk_reserve(const std::string& run_dir);

// Appends `line` and a newline to the record file `path` (stages.jsonl, restarts.jsonl); when the
// disk is full, releases the reserve in its directory and tries once more. false: the record could
// not be written (the caller says so: a lost record is never silent).
bool append_record_line(const std::string& path, const std::string& line);

}  // namespace gtrain
