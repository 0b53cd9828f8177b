// launch.h: starting the ranks of a job: detecting that this process already is one rank of an
// mpirun / srun launch, and otherwise building the mpirun command (hostfile from the allocation)
// and replacing this process with it.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gtrain {

struct RankEnvironment {
  bool launched = false;  // started by mpirun or srun as one of several ranks
  std::string launcher;   // "mpirun", "srun", or ""
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  bool pmix = false;  // srun: the step serves PMIx (PMIX_RANK), which Open MPI ranks start from
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
  std::vector<HostSlots> hosts;  // empty: all ranks on this machine
  std::string hostfile;          // where to write the hostfile (multi-host, or pin_hosts)
  bool pin_hosts = false;        // the hostfile even for one host: the others were left out
  // One rank on this machine without mpirun: the worker itself is the child, writing straight to
  // this console (a terminal keeps its progress bar), supervised as mpirun's ranks are.
  bool direct = false;
  bool oversubscribe = true;             // CPU ranks may share cores
  std::vector<std::string> forward_env;  // variable names to forward to remote ranks (-x)
  std::string executable;                // this program
  std::vector<std::string> args;         // its arguments (after the executable)
  std::vector<int> stop_signals;         // schedule.stop_signals: each asks the ranks to save and stop
  std::string stop_file;                 // written on the first stop signal; rank 0 reads it after each step
  std::string outcome_file;              // rank 0 writes "resumable" there once the stage's save is committed
  bool quiet = false;                    // --quiet: no notice on the console when a stop request comes
  // Called about once a second while the ranks run: a non-empty answer (a hung rank, named) ends
  // them at once, as the second TERM does (MpirunResult::watch_report).
  std::function<std::string()> watch;
  // Called about once a second once a stop request came, with its time: a non-empty answer (the step
  // under way cannot end and save within the save lead) ends the ranks at once, without a save
  // (MpirunResult::abandoned); the last committed checkpoint stays.
  std::function<std::string(double requested_unix)> after_stop;
};

// The mpirun argv for a launch (writes the hostfile when there are several hosts).
std::vector<std::string> mpirun_argv(const LaunchSpec& spec);

// Sets Open MPI's run-as-root permission when root, starts mpirun as a child and stays its parent:
// the first stop signal writes spec.stop_file (the ranks save at their next step and exit 3), TERM or
// INT again aborts them; USR1, USR2, TERM or INT outside the stop list go to mpirun as they would
// have without this parent, HUP outside it is ignored (the console went away); the second TERM or
// INT kills this host's ranks at once (SIGKILL; mpirun ends the others). mpirun dies with this process.
struct MpirunResult {
  int exit_code = 0;            // mpirun's exit code (128 + N: mpirun ended by signal N), or 128 + aborted_by
  int aborted_by = 0;           // the signal this process aborted the job for (0 = none)
  std::string watch_report;     // spec.watch's answer when it ended the ranks ("" = it did not)
  bool stop_requested = false;  // a stop signal reached this process while the ranks ran
  int dead_rank = -1;           // the first rank mpirun reported dead (-1: none)
  std::string dead_host;        // and its host
  std::string abandoned;        // spec.after_stop's answer when it ended the ranks ("" = it did not)
};
// spec.direct: the same for the one rank, started without mpirun.
MpirunResult run_mpirun(const LaunchSpec& spec);

// The processes whose parent is `pid` (from /proc): mpirun's children are this host's ranks.
std::vector<pid_t> child_processes(pid_t pid);

// Path of the running executable.
std::string self_executable();

}  // namespace gtrain
