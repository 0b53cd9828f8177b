// slurm_cleanup.h: what both Slurm suites do after every test: cancel the jobs a failed test left
// queued or running (they would hold the harness's GPUs and fail the tests after it) and wait until
// the queue is empty.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

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

}  // namespace gtrain::test
