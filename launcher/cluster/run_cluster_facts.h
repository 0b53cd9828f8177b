// run_cluster_facts.h: a run's ClusterFacts (runtime/core/run_dir/cluster_facts.h) from what a
// scheduler told: the partition, its quiet windows for the run's GPU count, each GPU-hour quota's
// remainder and burn-down; and the reading `gtrain report` does for it (history, samples, quotas).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "launcher/base/program_runner.h"
#include "launcher/cluster/week_profile.h"
#include "launcher/scheduler/cluster_reading.h"
#include "runtime/core/run_dir/cluster_facts.h"

namespace gtrain {

class SchedulerBackend;

// Whose quotas and jobs: $USER in `env`, else the effective user's name.
std::string cluster_user(const std::map<std::string, std::string>& env);

// The facts of `r` for a run of `want_gpus`: partition `p` (nullptr = none read), the quiet windows
// of `profile` (none without a week of it), and the quotas of `r` with a GPU-minute limit and a known use.
ClusterFacts cluster_facts_of(const ClusterReading& r, const PartitionFacts* p, const WeekProfile& profile,
                              int64_t want_gpus, int64_t now, const std::string& read_by);

// Reads `partition` ("" = the default one) now: the queue, four weeks of history with the samples
// gtrain's stages kept (cluster_samples.h), and `user`'s quotas ("" = cluster_user(env)). Never throws for what the
// scheduler cannot tell (a note); a partition it does not have is one more note.
ClusterFacts read_run_cluster_facts(const SchedulerBackend& b, const std::string& partition, int64_t want_gpus,
                                    const std::string& user, const std::map<std::string, std::string>& env,
                                    const CommandRunner& run, int64_t now, const std::string& read_by);

}  // namespace gtrain
