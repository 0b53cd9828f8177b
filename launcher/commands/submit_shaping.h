// submit_shaping.h: stages shaped to the cluster before `gtrain submit` queues them, from what
// `gtrain cluster` reads (launcher/cluster/): --when quiet (each stage that would wait begins at the
// partition's next quiet hour for its GPUs, within --deadline), --time auto (the largest GPUs x time
// rectangle the scheduler's test submission starts now: backfill), --account auto / --qos auto (per
// stage, the account or QOS that starts it earliest within what its quota has left), and the quota
// warning (a chain that would use up a GPU-minute quota: the step it would reach).
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "launcher/cluster/week_profile.h"
#include "launcher/commands/submit_command.h"
#include "launcher/scheduler/scheduler_backend.h"

namespace gtrain {

// What submit reads of the cluster: partitions and quotas always (cheap), the history with --when
// quiet. Never fails: what cannot be read is a note.
struct SubmitCluster {
  ClusterReading reading;
  int partition_index = -1;  // in reading.partitions: submit's --partition, else the default one (-1 = none)
  WeekProfile profile;       // of that partition (weeks 0 without history)
  const PartitionFacts* partition() const {
    return partition_index < 0 ? nullptr : &reading.partitions[static_cast<size_t>(partition_index)];
  }
};
SubmitCluster read_submit_cluster(const SubmitOptions& o, const SchedulerBackend& b, const CommandRunner& run,
                                  double now, bool history, bool partitions = true);

// "--deadline": a local date-time ("2026-12-10T08:00", "2026-12-10 08:00") or a duration from now
// ("3d", "36h"). ConfigError naming --deadline.
double parse_deadline(const std::string& text, double now);

// --when quiet: a stage whose GPUs were not free at its predicted start in 80% of weeks begins at
// the next hour of the week when they were (its --begin), unless that ends the chain after
// `deadline` (0 = none); later stages' predicted starts follow. One line per stage says why.
void delay_to_quiet(std::vector<StagePlan>& plans, const SubmitCluster& c, double limit_s, double deadline,
                    std::ostream& out);

// --time auto: the (GPUs, time limit) the scheduler would start now and that is largest in GPU-hours,
// from at most `max_probes` test submissions (for each GPU count, largest first, a binary search over
// 15 min ... 2 days up to the partition's and QOS's limits); gpus 0 when none starts now, and no
// probe at all when the scheduler has no test submission.
struct BackfillShape {
  int gpus = 0, nodes = 1;  // 0: nothing probed starts now
  double time_s = 0;
  double start = 0;         // the test submission's start estimate
  int probes = 0;           // test submissions made
  std::string table;        // every probe: GPUs, time, start
  bool from_queue = false;  // no test submission started now: the hole read from the queue (queue_hole)
};
// When no test submission starts now (sbatch --test-only places a job behind every job pending
// ahead of it, backfill or not), the hole backfill fills: the most GPUs of `gpu_counts` free now on
// one node (whole free nodes past one), for the time until the earliest start the scheduler plans for
// a pending job, less two minutes of backfill's resolution, at most `most_s` (0 = no cap). gpus 0 when
// no planned start bounds the hole or it is shorter than 15 minutes.
BackfillShape queue_hole(const PartitionFacts& p, const std::vector<int>& gpu_counts, double most_s, double now);

BackfillShape backfill_shape(const SubmitOptions& o, const SchedulerBackend& b, const SubmitCluster& c,
                             const std::vector<int>& gpu_counts, double now, const CommandRunner& run,
                             int max_probes = 20);

// --account auto / --qos auto: per stage, among the accounts (QOS) the user may charge, those whose
// quota has the stage's GPU-minutes left (earlier stages' use counted), the one whose test submission
// starts the first stage earliest (ties: the default). Sets plans[i].account / qos and prints why.
void choose_accounts(const SubmitOptions& o, const SchedulerBackend& b, const SubmitCluster& c,
                     std::vector<StagePlan>& plans, double limit_s, double now, const CommandRunner& run,
                     std::ostream& out);

// The quota warning: for each GPU-minute quota the chain charges (the stages' accounts and QOS, or
// the stated cluster.gpu_hours_quota), when finishing the run needs more than is left: the line
// saying so and the step it would reach. `gpu_minutes_per_step(gpus)`: the planner's step time x GPUs.
std::vector<std::string> quota_warnings(const SubmitCluster& c, const std::vector<StagePlan>& plans, int64_t steps_left,
                                        int64_t step_now, const std::function<double(int)>& gpu_minutes_per_step,
                                        const std::optional<QuotaFacts>& stated);

// Checks --when, --deadline, --time auto, --account auto and --qos auto against the scheduler and
// the config's quota windows (ConfigError naming the flag).
void check_shaping_options(const SubmitOptions& o, const SchedulerBackend& b, bool has_windows);

// --time auto, before anything else is checked: probes the backfill shape and returns the options
// with --time (and an open --gpus) set to it; says what it probed. Unchanged without --time auto.
SubmitOptions resolve_time_auto(const SubmitOptions& o, const SchedulerBackend& b, const CommandRunner& run, double now,
                                std::ostream& out);

// After the stages are planned: --when quiet, --account / --qos auto, and the quota warnings (the
// config's cluster.gpu_hours_quota counted too). Reads the cluster once (the history only when
// --when quiet or a stated quota needs it).
void shape_stages(const SubmitOptions& o, const JobConfig& cfg, const SchedulerBackend& b,
                  std::vector<StagePlan>& plans, double limit_s, const std::string& run_dir, const CommandRunner& run,
                  double now, std::ostream& out);

}  // namespace gtrain
