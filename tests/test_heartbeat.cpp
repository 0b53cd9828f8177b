// test_heartbeat.cpp: the hang rule of runtime/core/heartbeat.h (when a rank counts as stuck, which
// rank a report names) and a rank's heartbeat file written by its thread and read back.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/core/heartbeat.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

HeartbeatRecord beat(int rank, const std::string& phase, int64_t step, double progress, double beat_at,
                     double slowest = 0.1) {
  HeartbeatRecord b;
  b.rank = rank;
  b.host = "node" + std::to_string(rank);
  b.pid = 100 + rank;
  b.phase = phase;
  b.step = step;
  b.progress_unix = progress;
  b.beat_unix = beat_at;
  b.slowest_step_s = slowest;
  return b;
}

TEST(HangRule, AutoLimitIsFiveSlowestStepsAtLeastThirtySeconds) {
  HangRule rule;
  EXPECT_DOUBLE_EQ(stuck_after_s(rule, "forward", 10, 0.1, 0, 0), 30.0);
  EXPECT_DOUBLE_EQ(stuck_after_s(rule, "grad sync", 10, 12.0, 0, 0), 60.0);
  // Before the first step: the start-up timeout (model build, data, compilation).
  EXPECT_DOUBLE_EQ(stuck_after_s(rule, "start-up", 0, 0, 0, 0), 600.0);
  EXPECT_DOUBLE_EQ(stuck_after_s(rule, "forward", 0, 0, 0, 0), 600.0);
  // A save or an evaluation: its own measured duration x5 (at least 30 s); the first, unmeasured one
  // the start-up timeout.
  EXPECT_DOUBLE_EQ(stuck_after_s(rule, "save", 10, 0.1, 20.0, 0), 100.0);
  EXPECT_DOUBLE_EQ(stuck_after_s(rule, "save", 10, 0.1, 0, 0), 600.0);
  EXPECT_DOUBLE_EQ(stuck_after_s(rule, "eval", 10, 0.1, 0, 2.0), 30.0);
  // parallel.collective_timeout_s fixes the limit between steps (a save still gets its own).
  rule.fixed_s = 3;
  EXPECT_DOUBLE_EQ(stuck_after_s(rule, "forward", 10, 100.0, 0, 0), 3.0);
  EXPECT_DOUBLE_EQ(stuck_after_s(rule, "save", 10, 0.1, 20.0, 0), 100.0);
}

TEST(HangRule, NamesTheRankWhoseHeartbeatStoppedElseTheFirstToStall) {
  const HangRule rule;
  const double t = 1000;
  // All progressing: nothing to report.
  EXPECT_EQ(find_stuck_rank({beat(0, "forward", 50, t - 1, t), beat(1, "backward", 50, t - 2, t)}, 2, t, t - 100, rule),
            "");
  // Rank 1 stopped (its heartbeat too); rank 0 waits for it in the gradient sync.
  int stuck = -2;
  const std::string stopped = find_stuck_rank(
      {beat(0, "grad sync", 50, t - 40, t), beat(1, "backward", 50, t - 41, t - 41)}, 2, t, t - 100, rule, &stuck);
  EXPECT_EQ(stuck, 1);  // the launcher attributes the failure to the rank's host
  find_stuck_rank({beat(0, "forward", 50, t - 1, t)}, 1, t, t - 100, rule, &stuck);
  EXPECT_EQ(stuck, -1);
  EXPECT_EQ(stopped,
            "rank 1 (node1, pid 101) made no progress for 41 s in backward after step 50 (limit 30 s); its heartbeat "
            "stopped too: the process is stopped, frozen or gone");
  // A deadlock: every heartbeat goes on; the rank that stopped progressing first is named.
  EXPECT_EQ(
      find_stuck_rank({beat(0, "grad sync", 50, t - 35, t), beat(1, "forward", 50, t - 36, t)}, 2, t, t - 100, rule),
      "rank 1 (node1, pid 101) made no progress for 36 s in forward after step 50 (limit 30 s)");
  // A rank that never wrote a heartbeat counts from the attempt's start, with the start-up timeout.
  EXPECT_EQ(find_stuck_rank({beat(0, "start-up", 0, t - 5, t, 0)}, 2, t, t - 599, rule), "");
  EXPECT_EQ(find_stuck_rank({beat(0, "start-up", 0, t - 5, t, 0)}, 2, t, t - 601, rule),
            "rank 1 made no progress for 601 s in start-up (no heartbeat yet) (limit 600 s); its heartbeat stopped "
            "too: the process is stopped, frozen or gone");
  // Records older than the attempt (an earlier attempt's) do not count as its ranks'.
  EXPECT_EQ(
      find_stuck_rank({beat(0, "forward", 50, t - 200, t - 200), beat(1, "forward", 50, t - 1, t)}, 2, t, t - 10, rule),
      "");
}

// A stop request during a step that would run past the save lead: the step is abandoned once the
// lead (save_safety x the longest measured save + min_lead_s, at least 10 s) has passed, never while a
// save is under way or the ranks are starting up.
TEST(StopGrace, LongStepIsAbandonedAfterTheSaveLead) {
  std::vector<HeartbeatRecord> beats = {beat(0, "forward", 3, 1000.0, 1100.0, 472.0),
                                        beat(1, "backward", 3, 1010.0, 1100.0, 470.0)};
  beats[0].save_s = 4.0;
  EXPECT_DOUBLE_EQ(stop_grace_s(beats, 2.0, 5.0), 13.0);                          // 2 x 4 s + 5 s
  EXPECT_DOUBLE_EQ(stop_grace_s({beat(0, "forward", 3, 0, 0)}, 2.0, 5.0), 10.0);  // no save yet: the floor
  EXPECT_EQ(abandoned_step(beats, 1050.0, 1062.0, 2.0, 5.0), "");                 // 12 s < 13 s
  const std::string line = abandoned_step(beats, 1050.0, 1064.0, 2.0, 5.0);
  EXPECT_NE(line.find("the stop request came 14 s ago and rank 0 is still in step 4 (forward, its steps take up "
                      "to 472 s)"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("within the save lead of 13 s"), std::string::npos) << line;
  beats[1].phase = "save";  // a save under way commits or not at all: waited for
  EXPECT_EQ(abandoned_step(beats, 1050.0, 2000.0, 2.0, 5.0), "");
  beats[1].phase = "done";  // exiting
  EXPECT_EQ(abandoned_step(beats, 1050.0, 2000.0, 2.0, 5.0), "");
  // A start-up that outlasts the lead has nothing to save: it is ended too.
  beats[1].phase = "start-up";
  EXPECT_NE(abandoned_step(beats, 1050.0, 2000.0, 2.0, 5.0), "");
}

TEST(Heartbeat, ThreadWritesTheFileTheLauncherReads) {
  test::TempDir dir;
  Heartbeat& h = Heartbeat::get();
  h.start(dir.file("beats"), 3, "hostA", 0.05);
  h.phase(RankPhase::forward);
  h.step_done(7, 0.25);
  h.step_done(8, 0.5);
  h.measured(RankPhase::save, 1.5);
  h.phase(RankPhase::backward);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto beats = read_heartbeats(dir.file("beats"));
  ASSERT_EQ(beats.size(), 1u);
  EXPECT_EQ(beats[0].rank, 3);
  EXPECT_EQ(beats[0].host, "hostA");
  EXPECT_EQ(beats[0].step, 8);
  EXPECT_EQ(beats[0].phase, "backward");
  EXPECT_DOUBLE_EQ(beats[0].slowest_step_s, 0.5);
  EXPECT_DOUBLE_EQ(beats[0].save_s, 1.5);
  EXPECT_GE(beats[0].beat_unix, beats[0].progress_unix);
  h.stop();
  beats = read_heartbeats(dir.file("beats"));
  ASSERT_EQ(beats.size(), 1u);
  EXPECT_EQ(beats[0].phase, "done");
}

}  // namespace
}  // namespace gtrain
