// cluster_samples.h: ClusterSample, what gtrain saw of a partition during one of its own stages (GPUs
// free, the queue), kept in <profile dir>/cluster/<scheduler>-<cluster>.jsonl so that the hour-of-week
// profile still knows the hours a site's accounting has purged; and ClusterSampler, the launching
// process's thread that records them at a stage's start and every few minutes until it ends.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/cluster/week_profile.h"
#include "launcher/scheduler/cluster_reading.h"

namespace gtrain {

class SchedulerBackend;

struct ClusterSample {
  int64_t time = 0;           // unix seconds
  std::string scheduler;      // "slurm", "pbs"
  std::string cluster;        // the scheduler's cluster name ("" = unknown)
  std::string partition;      // partition or execution queue
  std::string job;            // the gtrain stage's job that saw it
  int64_t gpus = 0;           // the partition's GPUs
  int64_t free_gpus = -1;     // free on usable nodes
  int64_t pending_jobs = -1;  // the queue (-1 = unknown)
  int64_t pending_gpus = -1;
  int64_t running_jobs = -1;
};
void to_json(nlohmann::json& j, const ClusterSample& s);
void from_json(const nlohmann::json& j, ClusterSample& s);

// <profile_dir(env)>/cluster/<scheduler>-<cluster or "default">.jsonl; "" when there is no profile dir
// ($GTRAIN_PROFILE_DIR, else $HOME/.cache/gtrain).
std::string cluster_samples_path(const std::map<std::string, std::string>& env, const std::string& scheduler,
                                 const std::string& cluster);

// One sample per partition of `r` whose free GPUs it read.
std::vector<ClusterSample> samples_of(const ClusterReading& r, int64_t now, const std::string& job);

// Appends `samples` as JSON lines under an exclusive lock (several stages may share the file); a file
// past 2 MiB first drops samples older than a year. False (and nothing written) when it cannot.
bool append_cluster_samples(const std::string& path, const std::vector<ClusterSample>& samples);

// The samples in `path` (none when it is missing); lines that do not parse (a line torn by a crash)
// are skipped and counted in `skipped`.
std::vector<ClusterSample> read_cluster_samples(const std::string& path, int* skipped = nullptr);

// `partition`'s free GPUs over time, for build_week_profile.
std::vector<FreeSample> free_samples(const std::vector<ClusterSample>& samples, const std::string& partition);

// The samples kept of the cluster `r` was read from (cluster_samples_path of its scheduler and name).
std::vector<ClusterSample> kept_cluster_samples(const std::map<std::string, std::string>& env, const ClusterReading& r,
                                                int* skipped = nullptr);

// `r`'s history jobs in `partition`.
std::vector<HistoryJob> partition_jobs(const ClusterReading& r, const std::string& partition);

// The hour-of-week profile of `p` over [from, to): its jobs in `r`'s history where the accounting
// answered, and `samples` for the hours it does not show (build_week_profile).
WeekProfile partition_profile(const ClusterReading& r, const PartitionFacts& p, int64_t from, int64_t to,
                              const std::vector<ClusterSample>& samples);

// Reads the partitions and the queue now (no history, no quotas) and appends what it saw; the
// reading's commands each get `timeout_s`, and `cancelled` (when set and true) skips those not yet
// run. Nothing is read when the cluster's file changed less than `min_gap_s` ago (another stage of
// yours, a sweep's trials, sampled it just now: the cluster is the same for all). Returns the samples
// written (none where the scheduler told nothing, there is no file, or it was too soon).
std::vector<ClusterSample> record_cluster_samples(const SchedulerBackend& b,
                                                  const std::map<std::string, std::string>& env, int64_t now,
                                                  double timeout_s, double min_gap_s = 0,
                                                  const std::function<bool()>& cancelled = {});

// A thread that runs `sample` at once and then every `every_s` seconds until destroyed (the
// destructor wakes it and waits for the sample under way). It blocks every signal, which the
// launching process's own thread waits for.
class ClusterSampler {
 public:
  ClusterSampler(std::function<void(const std::function<bool()>& cancelled)> sample, double every_s);
  ~ClusterSampler();
  ClusterSampler(const ClusterSampler&) = delete;
  ClusterSampler& operator=(const ClusterSampler&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// The sampler of a stage on `b`'s allocation (samples every `every_minutes`); nullptr when `b` is no
// batch scheduler or `every_minutes` is 0.
std::unique_ptr<ClusterSampler> start_cluster_sampler(const SchedulerBackend& b,
                                                      const std::map<std::string, std::string>& env,
                                                      double every_minutes);

}  // namespace gtrain
