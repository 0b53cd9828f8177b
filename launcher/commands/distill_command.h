// distill_command.h: `gtrain distill cache CONFIG`: distillation's teacher run once over the whole
// training split, its top-k outputs per token written as a cache (runtime/core/distill_cache.h) that
// student runs read with distill.cache instead of running the teacher each step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gtrain {

struct DistillCacheOptions {
  std::string config_path;        // the student's job config (its [data], [model] seq_len and [distill])
  std::vector<std::string> sets;  // --set section.key=value
  std::string out;                // --out: the cache folder ("" = distill.cache)
  int ranks = 1;                  // --ranks: ranks to start on this machine (each takes every ranks-th shard)
  int64_t batch = 8;              // --batch: samples per teacher forward
  bool quiet = false;             // --quiet: errors only
  std::vector<std::string> argv;  // the command line after the program name, for mpirun
};

// Runs the teacher over every sample of the training split (data.kind's samples: packed rows of
// conversations, or every token window) and writes the cache, the manifest last; with several ranks
// each writes its own shards and rank 0 the manifest. 0 on success; ConfigError (exit 2) for a
// missing distill.teacher or folder, a teacher whose vocabulary does not cover the data's.
int distill_cache_command(const DistillCacheOptions& o);

}  // namespace gtrain
