// plan.cpp: Plan summaries.
#include "runtime/core/plan.h"

#include <cstdio>

#include "runtime/core/errors.h"

namespace gtrain {

std::string Plan::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "dp=%lld tp=%lld pp=%lld zero=%lld micro_batch=%lld grad_accum=%lld recompute=%s %s",
                (long long)dp, (long long)tp, (long long)pp, (long long)zero, (long long)micro_batch,
                (long long)grad_accum, recompute ? "on" : "off", precision.c_str());
  std::string s = buf;
  if (offload) s += " offload=optimizer";
  if (chunk > 0) s += " bitwise chunk=" + std::to_string(chunk);
  if (shard_teacher) s += " teacher=sharded";
  // Uneven shards: the samples each data-parallel replica takes ("shares 11,11,10").
  if (!even()) s += " shares " + shares();
  return s;
}

std::string Plan::estimate_summary() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "est %.2f GiB/rank, %.4g s/step%s%s", est_memory_bytes / (1024.0 * 1024.0 * 1024.0),
                est_step_seconds, profile.empty() ? "" : " on ", profile.c_str());
  return buf;
}

}  // namespace gtrain
