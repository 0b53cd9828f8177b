// run_cluster_facts.cpp: what a run records of its cluster, from a scheduler's reading.
#include "launcher/cluster/run_cluster_facts.h"

#include <pwd.h>
#include <unistd.h>

#include "launcher/cluster/cluster_samples.h"
#include "launcher/cluster/quota_burn.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/errors.h"

namespace gtrain {

std::string cluster_user(const std::map<std::string, std::string>& env) {
  if (const auto it = env.find("USER"); it != env.end() && !it->second.empty()) return it->second;
  const passwd* pw = getpwuid(geteuid());
  return pw ? pw->pw_name : std::to_string(geteuid());
}

ClusterFacts cluster_facts_of(const ClusterReading& r, const PartitionFacts* p, const WeekProfile& profile,
                              int64_t want_gpus, int64_t now, const std::string& read_by) {
  ClusterFacts f;
  f.read_at = static_cast<double>(now);
  f.read_by = read_by;
  f.scheduler = r.scheduler, f.cluster = r.cluster;
  f.notes = r.notes;
  if (p) {
    f.partition = p->name, f.gpus = p->gpus, f.free_gpus = p->free_gpus;
    f.max_time = p->max_time_s.str(true);
    f.quiet_for_gpus = want_gpus;
    f.history_weeks = profile.weeks;
    if (profile.weeks > 0) {
      for (const auto& w : quiet_windows(profile, want_gpus)) f.quiet_windows.push_back(w.text());
    }
  }
  for (const auto& q : r.quotas) {
    if (q.left_gpu_minutes() < 0) continue;
    QuotaLeft l;
    l.kind = q.kind, l.name = q.name, l.is_default = q.is_default;
    l.limit_gpu_hours = static_cast<double>(q.limit_gpu_minutes) / 60;
    l.left_gpu_hours = static_cast<double>(q.left_gpu_minutes()) / 60;
    if (r.history_read) {
      const BurnDown b = burn_down(q, r.history, now);
      l.burn_gpu_hours_per_day = b.burn_gpu_minutes_per_day / 60;
      l.runs_out = static_cast<double>(b.runs_out_unix);
    }
    f.quotas.push_back(l);
  }
  return f;
}

ClusterFacts read_run_cluster_facts(const SchedulerBackend& b, const std::string& partition, int64_t want_gpus,
                                    const std::string& user, const std::map<std::string, std::string>& env,
                                    const CommandRunner& run, int64_t now, const std::string& read_by) {
  ClusterQuery q;
  q.partition = partition;
  q.user = user.empty() ? cluster_user(env) : user;
  q.until_unix = now;
  q.since_unix = now - 4 * 7 * 86400;
  ClusterReading r;
  try {
    r = b.read_cluster(q, run);
  } catch (const ConfigError& e) {
    if (partition.empty()) throw;
    q.partition.clear();  // a partition gone since the run was submitted: the default one's facts
    r = b.read_cluster(q, run);
    r.notes.push_back(e.what());
  }
  const PartitionFacts* p = nullptr;
  for (const auto& x : r.partitions)
    if (!p && (x.name == partition || (partition.empty() && x.is_default))) p = &x;
  if (!p && !r.partitions.empty()) p = &r.partitions.front();
  const WeekProfile profile =
      p ? partition_profile(r, *p, q.since_unix, now, kept_cluster_samples(env, r)) : WeekProfile{};
  return cluster_facts_of(r, p, profile, want_gpus > 0 ? want_gpus : (p ? std::max<int64_t>(1, p->gpus * 3 / 4) : 1),
                          now, read_by);
}

}  // namespace gtrain
