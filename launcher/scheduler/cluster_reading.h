// cluster_reading.h: ClusterReading, what a scheduler tells `gtrain cluster` of its cluster: the
// partitions and their GPUs free now, the queue, the jobs its accounting keeps (all users' where it
// shows them), and the quotas the user may charge (accounts, QOS) with what is used; plus the Slurm
// parsers for each. What a scheduler cannot tell is a note, never a guess.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "launcher/base/program_runner.h"
#include "launcher/scheduler/scheduler_limits.h"

namespace gtrain {

// One job of the scheduler's accounting (sacct -X: the allocation, not its steps).
struct HistoryJob {
  std::string id, user, account, partition, qos, state;
  int64_t submit = 0, start = 0, end = 0;  // unix seconds; start 0 = not started, end 0 = not ended
  int64_t gpus = 0;                        // allocated GPUs (requested ones while pending)
  int64_t time_limit_s = 0;                // 0 = unknown or unlimited
};

struct PartitionFacts {
  std::string name;
  bool is_default = false;
  std::string state;       // UP, DOWN, DRAIN, INACTIVE
  int64_t nodes = 0;       // nodes in it
  int64_t gpus = 0;        // GPUs in it (TRES gres/gpu)
  int64_t free_gpus = -1;  // GPUs on usable nodes not allocated now (-1 = unknown)
  int64_t gpus_per_node = 0;
  LimitValue max_time_s, max_nodes;
  int64_t pending_jobs = -1, pending_gpus = -1, running_jobs = -1;  // the queue now (-1 = unknown)
  std::vector<int64_t> node_free;  // GPUs free now on each usable node of it (scontrol show node -d)
  int64_t next_planned_start = 0;  // the earliest start the scheduler plans for a job pending in it (0 = none)
};

// A reservation (scontrol show reservation): times when some nodes are kept for others, or down for
// maintenance; the time rules a partition's own record does not show.
struct ReservationFacts {
  std::string name;
  int64_t start = 0, end = 0;  // unix seconds
  std::string nodes;           // "node[1-2]", "ALL"
  int64_t node_count = 0;
  std::string partition;  // "" = any
  std::string users, accounts;
  std::string flags;         // "MAINT,IGNORE_JOBS,..."
  bool maintenance = false;  // MAINT: the nodes are down for everyone
};

// A quota the user may charge: an account's (or the user's association's) or a QOS's limits and use.
struct QuotaFacts {
  std::string kind;                // "account", "association", "QOS"
  std::string name;                // "proj", "proj/alice", "burst"
  bool is_default = false;         // the user's default account / QOS
  int64_t limit_gpu_minutes = -1;  // GrpTRESMins gres/gpu (-1 = none set)
  int64_t used_gpu_minutes = -1;   // what the scheduler counts as used against it (-1 = unknown)
  int64_t grp_gpus = -1;           // GrpTRES gres/gpu: GPUs at once for everyone charging it (-1 = none)
  int64_t grp_gpus_used = -1;      // of which in use now
  int64_t max_gpus_per_job = -1;   // MaxTRESPerJob gres/gpu (-1 = none)
  int64_t max_gpus_per_user = -1;  // MaxTRESPerUser gres/gpu (-1 = none)
  LimitValue max_wall_s;           // MaxWall per job
  std::string source;              // the command it came from
  // GPU-minutes left (-1 when no GPU-minute limit is set or its use is unknown).
  int64_t left_gpu_minutes() const {
    return limit_gpu_minutes >= 0 && used_gpu_minutes >= 0 ? std::max<int64_t>(0, limit_gpu_minutes - used_gpu_minutes)
                                                           : -1;
  }
};

struct ClusterQuery {
  std::string partition;   // "" = every partition (the default one first)
  std::string user;        // whose quotas
  int64_t since_unix = 0;  // history from
  int64_t until_unix = 0;  // history to (now)
  bool read_history = true;
  bool read_partitions = true;    // partitions, nodes and the queue now (submit's quota warning needs only quotas)
  bool read_quotas = true;        // accounts, QOS and their use (a stage's samples need only partitions)
  bool read_reservations = true;  // scontrol show reservation (with the partitions)
};

struct ClusterReading {
  std::string scheduler;  // "slurm"
  std::string cluster;    // the scheduler's name for the cluster (Slurm's ClusterName; "" = unknown)
  std::string user;
  std::vector<PartitionFacts> partitions;      // the asked one, or all (default first)
  std::vector<ReservationFacts> reservations;  // now and ahead
  bool history_read = false;                   // the accounting answered
  bool history_all_users = false;              // it showed other users' jobs too
  int64_t history_from = 0, history_to = 0;
  std::vector<HistoryJob> history;   // every job of the period (all partitions read)
  std::vector<QuotaFacts> quotas;    // what the user may charge
  std::vector<std::string> sources;  // the commands run, in order
  std::vector<std::string> notes;    // what could not be read, and why
};

// What Slurm tells: partitions (scontrol show partition / node, squeue), the history (sacct
// --allusers -X over the period), the user's accounts and QOS (sacctmgr) and their limits and use
// (scontrol show assoc_mgr). ConfigError for a --partition Slurm does not have; every other failure
// is a note and the rest goes on.
ClusterReading read_slurm_cluster(const ClusterQuery& q, const CommandRunner& run);

// What PBS Pro tells: execution queues (qstat -Q -f), nodes' GPUs (pbsnodes -a), and the jobs
// qstat -x -f keeps (finished ones only with job history enabled). No quotas: a note says so.
ClusterReading read_pbs_cluster(const ClusterQuery& q, const CommandRunner& run);

// PBS parsers, exposed for tests: blocks of "name" or "Job Id: X" / "Queue: X" headers followed by
// indented "key = value" lines (as qstat -f, qstat -Q -f and pbsnodes -a print them); and the jobs
// of `qstat -x -f` (qtime, stime, obittime, Resource_List.ngpus or select, walltime, queue, euser).
std::vector<std::pair<std::string, std::map<std::string, std::string>>> parse_pbs_blocks(const std::string& text);
std::vector<HistoryJob> parse_pbs_jobs(const std::string& text);

// Slurm parsers, exposed for tests.

// `sacct --parsable2 -X --format=...` with its header line -> jobs (columns found by name: JobID,
// User, Account, Partition, QOS, Submit, Start, End, AllocTRES, ReqTRES, Timelimit, State); step
// lines ("123.batch") skipped. Times in the local zone.
std::vector<HistoryJob> parse_sacct_jobs(const std::string& text);

// `scontrol show assoc_mgr flags=assoc|qos ...` -> one QuotaFacts per association or QOS record
// (`user`'s rows and account rows; other users' rows skipped).
std::vector<QuotaFacts> parse_assoc_mgr(const std::string& text, const std::string& user);

// "cpu=N(0),gres/gpu=600(45)" -> {600, 45} for `key`; {-1, used} for "N(45)"; {-1, -1} when absent.
std::pair<int64_t, int64_t> assoc_mgr_tres(const std::string& list, const std::string& key);

// `scontrol show partition -o` -> partitions (GPUs from TRES, limits).
std::vector<PartitionFacts> parse_partitions(const std::string& text);

// `scontrol show reservation -o` -> reservations ("No reservations in the system" -> none).
std::vector<ReservationFacts> parse_reservations(const std::string& text);

// `scontrol show config` -> its ClusterName ("" when absent).
std::string parse_cluster_name(const std::string& text);

// `scontrol show node -d -o` -> per partition its nodes' GPUs and those free now (nodes DOWN, DRAIN,
// FAIL or NOT_RESPONDING count as not free): from CfgTRES / AllocTRES where the accounting counts
// gres/gpu, else from Gres / GresUsed.
struct NodeGpus {
  int64_t gpus = 0;                // on all its nodes
  std::vector<int64_t> node_free;  // per usable node with GPUs, in the order listed
  int64_t free() const { return std::accumulate(node_free.begin(), node_free.end(), int64_t{0}); }
};
std::map<std::string, NodeGpus> parse_node_gpus(const std::string& text);
// "gpu:a100:4(S:0-1),shard:8" -> 4; "gpu:2(IDX:0,2)" -> 2; "(null)" -> 0.
int64_t gres_gpu_count(const std::string& gres);

// `squeue -h -t PD,R -o %i|%T|%P|%D|%b|%S` -> per partition {pending jobs, pending GPUs, running jobs,
// the earliest start the scheduler (backfill) plans for a pending job, 0 = none}.
std::map<std::string, std::vector<int64_t>> parse_queue(const std::string& text);

}  // namespace gtrain
