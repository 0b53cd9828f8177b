// device_sharing.h: which ranks share one GPU (each rank's device named by its host and PCI bus id,
// gathered over the world), and the communicator a rank's tensors take from that: NCCL for CUDA
// tensors when every rank has a GPU of its own, else MPI with GPU tensors staged through host
// memory (NCCL refuses two ranks on one device), with the line that says which and why.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"

namespace gtrain {

class MpiCommunicator;

struct DeviceSharing {
  std::vector<std::vector<int>> groups;  // ranks on one device, two or more each, by lowest rank
  std::vector<std::string> devices;      // the device each group shares ("host/0000:65:00.0")
  bool any() const { return !groups.empty(); }
  int most_on_one() const;  // the most ranks any device carries (1 when none is shared)
  // "ranks 0-2 share GPU 0000:65:00.0 on node7" (groups joined by "; "); "" when none.
  std::string describe() const;
};
// ids[r]: rank r's device ("host/bus id"; "" for a rank without one, never shared).
DeviceSharing find_shared_devices(const std::vector<std::string>& ids);

// GTRAIN_STAGED_COMM: unset or "auto" (stage only when ranks share a GPU or NCCL is missing), "1"
// (stage GPU tensors always), "0" (never: ranks that share a GPU are an error), "all" (CPU tensors
// too, through buffers of their own: the staging path checked on CPU ranks).
enum class StagingMode { automatic, always, never, all_tensors };
StagingMode staging_mode(const std::map<std::string, std::string>& env);

struct StagingChoice {
  bool staged = false;       // MPI with tensors staged through host memory
  bool stage_cpu = false;    // CPU tensors too (StagingMode::all_tensors)
  std::string note;          // one line for the start-up output ("" when there is nothing to say)
  int ranks_per_device = 1;  // the most ranks on one GPU: the planner splits its memory and rates among them
};
// The rule: `cuda` ranks, `world` of them, `have_nccl` in this build. Throws ConfigError when
// GTRAIN_STAGED_COMM=0 but ranks share a GPU (or there is no NCCL for several CUDA ranks).
StagingChoice choose_staging(const DeviceSharing& sharing, StagingMode mode, bool cuda, bool have_nccl, int world);

// Every rank's `mine`, in rank order (a collective over `comm`).
std::vector<std::string> allgather_strings(Communicator& comm, const std::string& mine);

// This rank's world over `mpi`: `device` is its CUDA ordinal (-1 for a CPU rank), `host` its host.
// Collective. Sets `choice` to choose_staging's (the same on every rank).
std::shared_ptr<Communicator> device_world(std::shared_ptr<MpiCommunicator> mpi, int device, const std::string& host,
                                           StagingMode mode, StagingChoice* choice);

}  // namespace gtrain
