// slurm_cleanup.h: what both Slurm suites do after every test: cancel the jobs a failed test left
// queued or running (they would hold the harness's GPUs and fail the tests after it) and wait until
// the queue is empty; and the plain harness's environment for its suite's clients and jobs.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "tests/support/test_paths.h"
#include "tests/support/test_util.h"

namespace gtrain::test {

class CancelLeftoverJobs : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo&) override {
    if (run_command("squeue -h -o %i").output.empty()) return;
    run_command("scancel --user=$(id -un)");
    for (int i = 0; i < 300 && !run_command("squeue -h -o %i").output.empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
};

// Installs the listener once per test binary (call from a namespace-scope initialiser).
inline bool cancel_leftover_jobs_after_each_test() {
  ::testing::UnitTest::GetInstance()->listeners().Append(new CancelLeftoverJobs);
  return true;
}

// The plain harness's environment (call from a namespace-scope initialiser; what is set already
// stays): its config for every client command and job, one thread a rank, and a profile folder of
// its own for the samples stages take (cluster.sample_minutes), not ~/.cache.
inline bool use_slurm_harness_env() {
  setenv("GTRAIN_SLURM_DIR", GTRAIN_SLURM_DIR.c_str(), 0);
  const std::string dir = std::getenv("GTRAIN_SLURM_DIR");
  setenv("SLURM_CONF", (dir + "/etc/slurm.conf").c_str(), 0);
  setenv("OMP_NUM_THREADS", "1", 0);
  setenv("GTRAIN_PROFILE_DIR", (dir + "/profile").c_str(), 0);
  return true;
}

}  // namespace gtrain::test
