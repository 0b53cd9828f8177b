// scheduler_limits.h: SchedulerLimits, what the scheduler allows this job and user (partition,
// QOS, association, the job's own time limit), read from scontrol / sacctmgr output, and which of
// those limits bind.
//
// Every value is a LimitValue: known, unlimited, or unknown. A limit that could not be read (the
// program is missing, the user may not see it, the output did not parse) stays unknown; nothing is
// guessed. Commands run (each through the injectable CommandRunner, 5 s timeout):
//   1. scontrol show job -o ID            -> TimeLimit, EndTime, Partition, Account, QOS, UserId, gres/gpu
//   2. scontrol show partition -o NAME    -> MaxTime, MaxNodes, QoS (partition QOS)
//   3. sacctmgr -P -n show qos where name=Q format=Name,MaxWall,MaxTRESPerJob,MaxTRESPerUser,GrpTRES
//   4. sacctmgr -P -n show assoc where account=A format=Account,User,Partition,GrpTRES,MaxTRES,MaxWall
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "launcher/base/program_runner.h"
#include "runtime/core/format.h"  // format_duration: Slurm's D-HH:MM:SS

namespace gtrain {

struct LimitValue {
  enum Kind { kUnknown, kUnlimited, kValue };
  Kind kind = kUnknown;
  int64_t value = 0;

  static LimitValue unknown() { return {}; }
  static LimitValue unlimited() { return {kUnlimited, 0}; }
  static LimitValue of(int64_t v) { return {kValue, v}; }
  bool known() const { return kind == kValue; }
  // "unknown", "unlimited", the number, or (as_duration) "2-00:00:00".
  std::string str(bool as_duration = false) const;
};

// One limit as shown to the user.
struct LimitLine {
  std::string scope;   // "partition gpu", "QOS normal", "association proj/alice", "job"
  std::string name;    // "MaxTime", "MaxTRESPerJob gres/gpu", ...
  std::string value;   // "2-00:00:00", "8", "unlimited", "unknown"
  bool binds = false;  // this limit is what caps the grant (or the time)
  std::string note;    // why it binds, or what it means
};

struct SchedulerLimits {
  std::string user, account, partition, qos, partition_qos;
  LimitValue job_time_limit_s;    // the job's own TimeLimit
  int64_t job_end_time_unix = 0;  // from scontrol EndTime (0 = unknown)
  int64_t job_gpus = -1;          // gres/gpu in the job's TRES (-1 = unknown)
  std::string job_gpu_type;       // "a100" from TresPerNode gres/gpu:a100:4 ("" = unknown)
  LimitValue partition_max_time_s, partition_max_nodes;
  LimitValue qos_max_wall_s, qos_max_gpus_per_job, qos_max_gpus_per_user, qos_grp_gpus;
  LimitValue partition_qos_max_gpus_per_job, partition_qos_max_gpus_per_user;
  LimitValue assoc_grp_gpus, assoc_max_gpus_per_job, assoc_max_wall_s;  // user's association
  LimitValue account_grp_gpus;                                          // account's own row
  std::vector<std::string> notes;                                       // what could not be read, and why

  // The limits as lines, marking those that bind given what was granted.
  std::vector<LimitLine> lines(int64_t granted_gpus, int64_t granted_nodes) const;
};

// Reads every limit for a Slurm job. Any field the commands do not give stays unknown.
// `user`, `account`, `partition`, `qos` come from the environment; scontrol fills those missing.
SchedulerLimits read_slurm_limits(const std::string& job_id, const std::string& user, const std::string& account,
                                  const std::string& partition, const std::string& qos, const CommandRunner& run);

// Parsers, exposed for tests.

// "Key=Value Key2=Value two ..." (one `scontrol -o` record) -> map. Tokens without '=' belong to
// the previous value.
std::map<std::string, std::string> parse_scontrol_record(const std::string& line);

// Slurm durations: "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS"; "UNLIMITED",
// "INFINITE" -> unlimited; "", "N/A", "NONE", "INVALID", "Partition_Limit" or garbage -> unknown.
LimitValue parse_slurm_duration(const std::string& text);

// "2024-05-01T14:30:00" in the local time zone -> Unix seconds; "Unknown", "N/A", "None" -> 0.
int64_t parse_slurm_datetime(const std::string& text);

// GPU count in a TRES string ("cpu=64,gres/gpu=8,node=2" -> 8; typed "gres/gpu:a100=4" counted
// when no untyped entry exists). -1 when absent.
int64_t tres_gpu_count(const std::string& tres);

}  // namespace gtrain
