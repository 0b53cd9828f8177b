// launch.h: starting the ranks of a job: detecting that this process already is one rank of an
// mpirun / srun launch, and otherwise building the mpirun command (hostfile from the allocation)
// and replacing this process with it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace gtrain {

struct RankEnvironment {
  bool launched = false;  // started by mpirun or srun as one of several ranks
  std::string launcher;   // "mpirun", "srun", or ""
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  bool pmix = false;      // srun: the step serves PMIx (PMIX_RANK), which Open MPI ranks start from
};

RankEnvironment detect_rank_environment(const std::map<std::string, std::string>& env);

// Throws ConfigError (one line, exit 2) for ranks that MPI cannot start: srun tasks without PMIx
// (srun --mpi=none, Slurm's default MpiDefault), where MPI_Init would abort in every rank.
void require_mpi_wireup(const RankEnvironment& r);

struct HostSlots {
  std::string host;
  int slots = 1;
};

struct LaunchSpec {
  int ranks = 1;
  std::vector<HostSlots> hosts;       // empty: all ranks on this machine
  std::string hostfile;               // where to write the hostfile (multi-host)
  bool oversubscribe = true;          // CPU ranks may share cores
  std::vector<std::string> forward_env;  // variable names to forward to remote ranks (-x)
  std::string executable;             // this program
  std::vector<std::string> args;      // its arguments (after the executable)
};

// The mpirun argv for a launch (writes the hostfile when there are several hosts).
std::vector<std::string> mpirun_argv(const LaunchSpec& spec);

// Sets Open MPI's run-as-root permission when root, then execs mpirun. Returns only on failure
// (throws ConfigError naming the program when mpirun cannot be started).
[[noreturn]] void exec_mpirun(const LaunchSpec& spec);

// Path of the running executable.
std::string self_executable();

}  // namespace gtrain
