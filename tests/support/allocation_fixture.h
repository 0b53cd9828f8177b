// allocation_fixture.h: what the allocation and scheduler-backend suites share: recorded scheduler
// output (scontrol, sacctmgr), a runner that replays it, and machines to discover on.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/program_runner.h"
#include "launcher/scheduler/allocation.h"
#include "runtime/core/errors.h"
#include "tests/support/test_util.h"

namespace gtrain::alloc_test {

using Env = std::map<std::string, std::string>;
using Strings = std::vector<std::string>;

inline std::string error_of(const std::function<void()>& f) {
  return test::error_of<ConfigError>(f);
}

// A runner that replays recorded outputs by command line and records what was asked.
struct FakeRunner {
  std::map<std::string, std::string> outputs;
  std::vector<std::string> calls;
  CommandRunner runner() {
    return [this](const std::vector<std::string>& argv) -> std::optional<std::string> {
      std::string key;
      for (const auto& a : argv) key += (key.empty() ? "" : " ") + a;
      calls.push_back(key);
      auto it = outputs.find(key);
      if (it == outputs.end()) return std::nullopt;
      return it->second;
    };
  }
};

inline HardwareInfo cpu_machine(const std::string& host, int cores) {
  HardwareInfo hw;
  hw.hostname = host;
  hw.cores = cores;
  hw.memory_bytes = 8LL << 30;
  hw.cuda_build = false;
  return hw;
}

inline HardwareInfo cuda_machine(const std::string& host, int gpus) {
  HardwareInfo hw = cpu_machine(host, 64);
  hw.cuda_build = true;
  for (int i = 0; i < gpus; ++i) {
    hw.gpus.push_back({i, "NVIDIA A100-SXM4-80GB", "GPU-" + std::to_string(1000 + i), 85899345920LL, 12, gpus - 1});
  }
  return hw;
}

inline DiscoveryOptions with(const HardwareInfo& hw, bool limits = true) {
  DiscoveryOptions o;
  o.hardware = hw;
  o.read_limits = limits;
  return o;
}

inline const char* const kScontrolJob =
    "JobId=4242 JobName=train UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A Priority=4294901 Nice=0 "
    "Account=proj QOS=normal JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 "
    "Reboot=0 ExitCode=0:0 RunTime=00:10:02 TimeLimit=04:00:00 TimeMin=N/A SubmitTime=2024-05-01T10:19:00 "
    "EligibleTime=2024-05-01T10:19:00 AccrueTime=2024-05-01T10:19:00 StartTime=2024-05-01T10:30:00 "
    "EndTime=2024-05-01T14:30:00 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2024-05-01T10:30:00 "
    "Scheduler=Main Partition=gpu AllocNode:Sid=login01:12345 ReqNodeList=(null) ExcNodeList=(null) "
    "NodeList=gpu[01-02] BatchHost=gpu01 NumNodes=2 NumCPUs=16 NumTasks=2 CPUs/Task=8 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=16,mem=128G,node=2,billing=16,gres/gpu=2 Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* "
    "MinCPUsNode=8 MinMemoryNode=64G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK "
    "Contiguous=0 Licenses=(null) Network=(null) Command=/home/alice/train.sh WorkDir=/home/alice "
    "StdErr=/home/alice/slurm-4242.out StdIn=/dev/null StdOut=/home/alice/slurm-4242.out Power= "
    "TresPerNode=gres/gpu:a100:1\n";
inline const char* const kScontrolPartition =
    "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A "
    "DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=4 MaxTime=2-00:00:00 "
    "MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu[01-16] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO "
    "ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=1024 TotalNodes=16 "
    "SelectTypeParameters=NONE JobDefaults=(null) DefMemPerCPU=4000 MaxMemPerNode=UNLIMITED "
    "TRES=cpu=1024,mem=8000G,node=16,billing=1024,gres/gpu=64\n";
inline const char* const kSacctmgrQos = "normal|2-00:00:00|gres/gpu=2|gres/gpu=4|\n";
inline const char* const kSacctmgrAssoc =
    "proj|||gres/gpu=16||\n"
    "proj|alice||gres/gpu=8||12:00:00\n"
    "proj|bob|||cpu=64|\n";

inline void record_slurm_limits(FakeRunner* r) {
  r->outputs["scontrol show job -o 4242"] = kScontrolJob;
  r->outputs["scontrol show partition -o gpu"] = kScontrolPartition;
  r->outputs["sacctmgr -P -n show qos where name=normal format=Name,MaxWall,MaxTRESPerJob,MaxTRESPerUser,GrpTRES"] =
      kSacctmgrQos;
  r->outputs["sacctmgr -P -n show assoc where account=proj format=Account,User,Partition,GrpTRES,MaxTRES,MaxWall"] =
      kSacctmgrAssoc;
}

}  // namespace gtrain::alloc_test
