// cluster_config.h: the [cluster] section: facts about the user's standing on the cluster that the
// scheduler does not keep, for `gtrain submit`'s quota warning (launcher/commands/submit_shaping.h),
// and how often a stage samples its partition for `gtrain cluster` (launcher/cluster/cluster_samples.h).
#pragma once

#include <string>

#include "runtime/core/config/schema.h"

namespace gtrain {

struct ClusterConfig {
  double gpu_hours_quota = 0;  // GPU-hours the site grants per period outside the scheduler (0 = none stated)
  std::string quota_since;     // "YYYY-MM-DD": when the quota's period began ("" = the 1st of this month)
  double sample_minutes = 10;  // minutes between a stage's samples of its partition (0 = none)

  template <class V>
  void visit(V& v) {
    v("gpu_hours_quota", gpu_hours_quota,
      "GPU-hours a site grants outside the scheduler (a quota it does not enforce with GrpTRESMins): "
      "gtrain submit warns when the chain would use up what is left of it (your jobs' GPU time in the "
      "accounting since quota_since) and says how far it would get; 0 = none stated.",
      cfg::at_least(0.0));
    v("quota_since", quota_since,
      "When the quota's period began, YYYY-MM-DD (local time); \"\" = the first day of this month.");
    v("sample_minutes", sample_minutes,
      "Minutes between the samples a stage under Slurm or PBS takes of its partition (GPUs free, the "
      "queue), kept in <profile dir>/cluster/ for gtrain cluster's hour-of-week profile, which then knows "
      "the hours the site's accounting has purged; one at the stage's start, 0 = none.",
      cfg::at_least(0.0));
  }
};

}  // namespace gtrain
