// allocation.h: Allocation, exactly what the scheduler granted this job (nodes, GPUs per node,
// CPUs, tasks, time, partition, account, limits), and discover_allocation, which reads it.
//
// Discovery order (the first that applies decides `scheduler`; the ordered detection list is
// GTRAIN_SCHEDULER_BACKENDS in scheduler/scheduler_kind.h, each entry one scheduler/*_backend.cpp):
//   1. Slurm   (SLURM_JOB_ID): SLURM_JOB_NODELIST, SLURM_STEP_GPUS / SLURM_JOB_GPUS /
//              SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE / SLURM_GPUS, SLURM_NTASKS,
//              SLURM_TASKS_PER_NODE, SLURM_CPUS_ON_NODE, SLURM_JOB_CPUS_PER_NODE; end time from
//              SLURM_JOB_END_TIME or `squeue -h -j ID -o %e`; limits from scontrol / sacctmgr.
//   2. PBS Pro / Torque (PBS_JOBID): PBS_NODEFILE, `qstat -f ID` (exec_vnode ngpus, walltime,
//              queue, account), PBS_GPUFILE (Torque), CUDA_VISIBLE_DEVICES.
//   3. LSF     (LSB_JOBID): LSB_MCPU_HOSTS, LSB_QUEUE, LSB_PROJECT_NAME, CUDA_VISIBLE_DEVICES.
//   4. cuda_env (CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES set, no scheduler): indices,
//              UUIDs, empty, "none"/"void"/"-1" (no GPU), "all" (every device NVML sees).
//   5. local:  the hardware: NVML devices in CUDA builds; otherwise no GPU and CPU ranks.
// Scheduler GPU variables describe the node discovery runs on; other nodes of a multi-node job
// get the per-node count (SLURM_GPUS_PER_NODE, exec_vnode) or, failing that, this node's count,
// and a note says so. What stays unknown is reported as unknown, never guessed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/hardware_query.h"
#include "launcher/base/program_runner.h"
#include "launcher/scheduler/scheduler_limits.h"
#include "runtime/core/scheduler_kind.h"

namespace gtrain {

struct NodeAllocation {
  std::string host;
  std::vector<int> gpus;  // granted GPU indices on this node (ranks use CUDA ordinals 0..size-1)
  int cpus = 0;           // CPUs granted on this node (0 = unknown)
  int tasks = 0;          // tasks the scheduler placed on this node (0 = unknown)
};

struct Allocation {
  SchedulerKind scheduler = SchedulerKind::local;  // shown as "slurm", "pbs", "lsf", "cuda_env", "local"
  std::string job_id;
  std::vector<NodeAllocation> nodes;
  std::string gpu_model;               // "NVIDIA A100-SXM4-80GB" (NVML) or a scheduler GPU type ("a100"); "" = unknown
  int64_t gpu_memory_bytes = 0;        // per GPU (NVML); 0 = unknown
  std::vector<std::string> gpu_uuids;  // when the visible devices were given as UUIDs
  int nvlink_links = -1;               // active NVLink links of the first granted GPU (-1 = unknown)
  int nvlink_peers = -1;               // GPUs it reaches over NVLink (-1 = unknown)
  int tasks = 0;                       // tasks in the job (SLURM_NTASKS, ...); 0 = unknown
  int64_t time_limit_s = 0;            // the job's time limit; 0 = unknown (or unlimited)
  int64_t end_time_unix = 0;           // when the scheduler ends the job; 0 = unknown
  std::string partition;               // Slurm partition, PBS/LSF queue
  std::string account;
  std::string qos;
  std::string user;
  std::string this_host;             // the node discovery ran on
  bool cuda_build = false;           // false: each granted GPU runs as one CPU rank
  int cpu_ranks = 1;                 // ranks when no GPU is granted: the scheduler's tasks, or 1
  int ranks_override = 0;            // --ranks (0 = none)
  std::vector<std::string> sources;  // the variables and commands that were read, "NAME=value"
  std::vector<std::string> notes;    // assumptions made and what is unknown
  bool limits_read = false;          // `limits` holds what scontrol / sacctmgr said
  SchedulerLimits limits;

  int total_gpus() const;
  int gpus_per_node() const;  // the largest per-node GPU count
  // Ranks to start: --ranks when given; else one per granted GPU (CUDA ranks, or on a CPU-only
  // build one CPU rank per GPU); else cpu_ranks.
  int world_size() const;
  std::string world_size_reason() const;  // one line: why world_size() is what it is
};

struct DiscoveryOptions {
  int ranks = 0;                         // --ranks N (0 = from the allocation)
  bool read_limits = true;               // run scontrol / sacctmgr / squeue / qstat
  bool read_end_time = false;            // without read_limits: still ask squeue for the job's end time
                                         // when the environment lacks it (gtrain run's deadline)
  std::optional<HardwareInfo> hardware;  // tests inject this; default: query_hardware()
};

// Reads the allocation from `env` (usually process_environment()) and the scheduler's commands
// through `run`. Throws ConfigError naming the variable when one is malformed.
Allocation discover_allocation(const std::map<std::string, std::string>& env, const CommandRunner& run,
                               const DiscoveryOptions& options = {});

// Parsers, exposed for tests.

struct VisibleDevices {
  enum Kind { kUnset, kNone, kAll, kList };
  Kind kind = kUnset;
  std::vector<int> indices;        // kList: the indices (UUID entries get their position)
  std::vector<std::string> uuids;  // kList: UUID entries ("GPU-...", "MIG-...")
};
// CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES: "0,1", "GPU-8f6c...,GPU-1a2b...", "", "none",
// "void", "NoDevFiles", "-1", "all". Anything else is a ConfigError naming `what`.
VisibleDevices parse_visible_devices(const std::string& text, const std::string& what);

// "0,1,3" or "0-3,6" -> indices. ConfigError naming `what` when malformed.
std::vector<int> parse_index_list(const std::string& text, const std::string& what);

// "[type:]count" as in SLURM_GPUS_PER_NODE ("4", "a100:4", "a100:2,v100:2" -> 4). Returns the
// count, and the type in *type when one is given.
int parse_gpu_count(const std::string& text, const std::string& what, std::string* type);

// PBS parsers (scheduler/pbs_backend.cpp).

// PBS exec_vnode "(n1:ncpus=8:ngpus=4)+(n2[0]:ngpus=2)" -> per host (first appearance order)
// {ncpus, ngpus}.
std::vector<std::pair<std::string, std::pair<int, int>>> parse_pbs_exec_vnode(const std::string& text);

// `qstat -f` output -> attribute map (continuation lines joined).
std::map<std::string, std::string> parse_qstat_full(const std::string& text);

}  // namespace gtrain
