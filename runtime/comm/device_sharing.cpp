// device_sharing.cpp: ranks on one GPU found from their bus ids; NCCL or host staging chosen.
#include "runtime/comm/device_sharing.h"

#include <algorithm>
#include <cstring>

#include "runtime/comm/staged_communicator.h"
#include "runtime/common/cuda_device.h"
#include "runtime/core/errors.h"

#ifdef GTRAIN_WITH_MPI
#include "runtime/comm/mpi_communicator.h"
#endif
#if defined(GTRAIN_WITH_NCCL) && defined(GTRAIN_WITH_MPI)
#include "runtime/comm/routed_communicator.h"
#endif

namespace gtrain {
namespace {

// "0-2" for consecutive ranks, else "0, 2, 5".
std::string rank_list(const std::vector<int>& ranks) {
  bool consecutive = true;
  for (size_t i = 1; i < ranks.size(); ++i) consecutive = consecutive && ranks[i] == ranks[i - 1] + 1;
  if (consecutive && ranks.size() > 2) return std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

const char* const kStagedWhy = "GPU tensors go over MPI through host memory (slower than NCCL)";

}  // namespace

std::string DeviceSharing::describe() const {
  std::string s;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string& d = devices[g];
    const auto slash = d.find('/');
    const std::string where =
        slash == std::string::npos ? "GPU " + d : "GPU " + d.substr(slash + 1) + " on " + d.substr(0, slash);
    s += (s.empty() ? "" : "; ") + std::string("ranks ") + rank_list(groups[g]) + " share " + where;
  }
  return s;
}

int DeviceSharing::most_on_one() const {
  size_t most = 1;
  for (const auto& g : groups) most = std::max(most, g.size());
  return static_cast<int>(most);
}

DeviceSharing find_shared_devices(const std::vector<std::string>& ids) {
  DeviceSharing s;
  std::vector<bool> seen(ids.size(), false);
  for (size_t r = 0; r < ids.size(); ++r) {
    if (seen[r] || ids[r].empty()) continue;
    std::vector<int> group{static_cast<int>(r)};
    for (size_t k = r + 1; k < ids.size(); ++k) {
      if (ids[k] == ids[r]) {
        group.push_back(static_cast<int>(k));
        seen[k] = true;
      }
    }
    if (group.size() < 2) continue;
    s.groups.push_back(std::move(group));
    s.devices.push_back(ids[r]);
  }
  return s;
}

StagingMode staging_mode(const std::map<std::string, std::string>& env) {
  const auto it = env.find("GTRAIN_STAGED_COMM");
  if (it == env.end() || it->second.empty() || it->second == "auto") return StagingMode::automatic;
  if (it->second == "1") return StagingMode::always;
  if (it->second == "0") return StagingMode::never;
  if (it->second == "all") return StagingMode::all_tensors;
  throw ConfigError("GTRAIN_STAGED_COMM=" + it->second + ": expected auto, 1, 0 or all",
                    "unset it: gtrain stages GPU tensors through host memory only where ranks share a GPU");
}

StagingChoice choose_staging(const DeviceSharing& sharing, StagingMode mode, bool cuda, bool have_nccl, int world) {
  StagingChoice c;
  c.ranks_per_device = cuda ? sharing.most_on_one() : 1;
  if (mode == StagingMode::all_tensors) {
    c.staged = c.stage_cpu = true;
    c.note = "GTRAIN_STAGED_COMM=all: every tensor, CPU ones too, goes through a host buffer of its own";
    return c;
  }
  if (!cuda || world < 2) return c;
  if (sharing.any()) {
    if (mode == StagingMode::never) {
      throw ConfigError(
          sharing.describe() + ", NCCL refuses two ranks on one device and GTRAIN_STAGED_COMM=0",
          "unset GTRAIN_STAGED_COMM (GPU tensors then go through host memory), or start one rank per GPU");
    }
    c.staged = true;
    c.note = sharing.describe() + ": NCCL refuses two ranks on one device, so " + kStagedWhy;
    return c;
  }
  if (!have_nccl) {
    if (mode == StagingMode::never) {
      throw ConfigError(std::to_string(world) +
                            " CUDA ranks need NCCL, this gtrain was built without it and "
                            "GTRAIN_STAGED_COMM=0",
                        "install NCCL (nccl.h, libnccl) and rebuild, or unset GTRAIN_STAGED_COMM");
    }
    c.staged = true;
    c.note = std::string("this gtrain was built without NCCL, so ") + kStagedWhy;
    return c;
  }
  if (mode == StagingMode::always) {
    c.staged = true;
    c.note = std::string("GTRAIN_STAGED_COMM=1: ") + kStagedWhy;
  }
  return c;
}

std::vector<std::string> allgather_strings(Communicator& comm, const std::string& mine) {
  const int n = comm.size();
  if (n == 1) return {mine};
  auto len = torch::tensor({static_cast<int64_t>(mine.size())}, torch::kLong);
  comm.allreduce(len, ReduceOp::kMax);
  const int64_t width = len.item<int64_t>() + 1;  // a NUL ends each entry
  auto in = torch::zeros({width}, torch::kByte), out = torch::empty({width * n}, torch::kByte);
  std::memcpy(in.data_ptr(), mine.data(), mine.size());
  comm.allgather(in, out);
  std::vector<std::string> all;
  for (int r = 0; r < n; ++r) all.emplace_back(reinterpret_cast<const char*>(out.data_ptr<uint8_t>() + r * width));
  return all;
}

std::shared_ptr<Communicator> device_world(std::shared_ptr<MpiCommunicator> mpi, int device, const std::string& host,
                                           StagingMode mode, StagingChoice* choice) {
#ifdef GTRAIN_WITH_MPI
  const bool cuda = device >= 0;
  std::string id;
  if (cuda) {
    const std::string bus = cuda::device_bus_id(device);
    id = host + "/" + (bus.empty() ? "cuda:" + std::to_string(device) : bus);
  }
  const DeviceSharing sharing =
      cuda && mpi->size() > 1 ? find_shared_devices(allgather_strings(*mpi, id)) : DeviceSharing{};
#if defined(GTRAIN_WITH_NCCL)
  const bool have_nccl = true;
#else
  const bool have_nccl = false;
#endif
  const StagingChoice c = choose_staging(sharing, mode, cuda, have_nccl, mpi->size());
  if (choice) *choice = c;
  if (c.staged) return std::make_shared<StagedCommunicator>(mpi, c.stage_cpu);
#if defined(GTRAIN_WITH_NCCL)
  if (cuda) return RoutedCommunicator::create(mpi, device);
#endif
  return mpi;
#else
  (void)mpi, (void)device, (void)host, (void)mode, (void)choice;
  throw Error("device_world: this gtrain was built without MPI");
#endif
}

}  // namespace gtrain
