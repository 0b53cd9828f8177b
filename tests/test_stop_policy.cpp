// test_stop_policy.cpp: when the ranks stop early: a signal, the launcher's stop file (rank 0), a
// deadline inside the lead the next step and a save need (rank 0), and the reason every rank reports
// once they agreed.
#include <gtest/gtest.h>

#include "runtime/core/stop_policy.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

constexpr double kDeadline = 1.0e9;

StopPolicy::Settings deadline_settings() {
  StopPolicy::Settings s;
  s.deadline_unix = kDeadline;
  s.deadline_source = "--time-limit";
  s.save_safety = 2.0;
  s.min_lead_s = 5.0;
  return s;
}

TEST(StopPolicy, NothingToStopFor) {
  const StopPolicy p({}, true);
  const auto d = p.decide(0, kDeadline, 1.0, 0.0);
  EXPECT_EQ(d.code, StopPolicy::kGoOn);
  EXPECT_EQ(p.agreed_reason(d, d.code), "");
}

TEST(StopPolicy, SignalStopsEveryRankAndBeatsTheDeadline) {
  const StopPolicy p(deadline_settings(), false);
  const auto d = p.decide(15, kDeadline + 10, 1.0, 0.0);
  EXPECT_EQ(d.code, StopPolicy::kSignal);
  EXPECT_EQ(d.reason, "signal 15");
  EXPECT_EQ(d.signal, 15);
  EXPECT_EQ(d.detail, "");
  EXPECT_EQ(p.agreed_reason(d, d.code), "signal 15");
  const StopPolicy main(deadline_settings(), true);
  EXPECT_EQ(main.decide(15, kDeadline + 10, 1.0, 0.0).code, StopPolicy::kSignal);
}

// The launcher writes its stop request into the stop file; rank 0 reads it, the others learn it.
TEST(StopPolicy, StopFileIsRankZeros) {
  test::TempDir dir;
  StopPolicy::Settings s;
  s.stop_file = dir.file("stop");
  const StopPolicy main(s, true), other(s, false);
  EXPECT_EQ(main.decide(0, 0, 1.0, 0.0).code, StopPolicy::kGoOn);  // no file yet
  test::write_file(s.stop_file, "");
  EXPECT_EQ(main.decide(0, 0, 1.0, 0.0).code, StopPolicy::kGoOn);  // an empty request
  test::write_file(s.stop_file, "signal 10\n");
  const auto d = main.decide(0, 0, 1.0, 0.0);
  EXPECT_EQ(d.code, StopPolicy::kSignal);
  EXPECT_EQ(d.reason, "signal 10");
  const auto o = other.decide(0, 0, 1.0, 0.0);
  EXPECT_EQ(o.code, StopPolicy::kGoOn);
  EXPECT_EQ(other.agreed_reason(o, StopPolicy::kSignal), "signal (on another rank)");
  // The agreement carries the number: a rank that got none reports the other's signal.
  EXPECT_EQ(other.agreed_reason(o, StopPolicy::kSignal, 15), "signal 15");
}

// The lead: the last step's time, save_safety x the longest save (at least 1 s), min_lead_s.
TEST(StopPolicy, DeadlineKeepsTheLeadForTheNextStepAndASave) {
  const StopPolicy p(deadline_settings(), true);
  // 1 s step + 2 x max(0.5, 1) s + 5 s = 8 s.
  EXPECT_EQ(p.decide(0, kDeadline - 8.5, 1.0, 0.5).code, StopPolicy::kGoOn);
  const auto d = p.decide(0, kDeadline - 7.0, 1.0, 0.5);
  EXPECT_EQ(d.code, StopPolicy::kDeadline);
  EXPECT_EQ(d.reason, "deadline (--time-limit)");
  EXPECT_EQ(d.detail,
            "7.0 s left before the deadline (--time-limit) < next step 1.00 s + 2 x save 1.0 s "
            "(schedule.save_safety x the longest save, at least 1 s) + schedule.min_lead_s 5 s");
  // A longer save widens the lead: 1 + 2 x 3 + 5 = 12 s.
  EXPECT_EQ(p.decide(0, kDeadline - 11.0, 1.0, 3.0).code, StopPolicy::kDeadline);
  // Only rank 0 watches the clock; the others learn it from the agreement.
  const StopPolicy other(deadline_settings(), false);
  const auto o = other.decide(0, kDeadline - 1.0, 1.0, 0.5);
  EXPECT_EQ(o.code, StopPolicy::kGoOn);
  EXPECT_EQ(other.agreed_reason(o, StopPolicy::kDeadline), "deadline (--time-limit)");
}

// Before the first step only a deadline already past counts: every stage that starts in time makes
// progress.
TEST(StopPolicy, BeforeTheFirstStepOnlyAPastDeadlineCounts) {
  const StopPolicy p(deadline_settings(), true);
  EXPECT_EQ(p.decide(0, kDeadline - 0.5, 0.0, 0.0, /*before_first_step=*/true).code, StopPolicy::kGoOn);
  const auto d = p.decide(0, kDeadline + 1.0, 0.0, 0.0, true);
  EXPECT_EQ(d.code, StopPolicy::kDeadline);
  EXPECT_EQ(d.detail, "the deadline (--time-limit) passed 1.0 s before the first step");
}

// Issue 47: a stage whose first step (472 s estimated) and a save cannot fit before its deadline
// (--time-limit 30s) is refused before it starts; a short step in a short stage (the README tour's
// 6 s) starts, even inside the trainer's lead (it then stops after step 1 and saves).
TEST(StopPolicy, FirstStepLongerThanTheStageIsRefused) {
  EXPECT_EQ(first_step_cannot_fit(472.0, 0.0, 30.0, "--time-limit"),
            "the first step is estimated at 472 s and a save at 1 s, but the stage has 30 s before its deadline "
            "(--time-limit): it would end without a checkpoint");
  EXPECT_EQ(first_step_cannot_fit(0.05, 0.0, 6.0, "--time-limit"), "");
  EXPECT_EQ(first_step_cannot_fit(0.05, 0.0, 2.0, "--time-limit"), "") << "inside the lead, but a step and a save fit";
  EXPECT_EQ(first_step_cannot_fit(20.0, 9.0, 30.0, "slurm end time"), "");
  EXPECT_NE(first_step_cannot_fit(20.0, 11.0, 30.0, "slurm end time"), "") << "the measured save counts";
  EXPECT_NE(first_step_cannot_fit(0.5, 0.0, 1.2, "quota window"), "") << "a save takes at least 1 s";
  EXPECT_EQ(first_step_cannot_fit(0.0, 0.0, 1.0, "--time-limit"), "") << "no estimate: no refusal";
  EXPECT_EQ(first_step_cannot_fit(472.0, 0.0, 0.0, ""), "") << "no deadline";
}

TEST(StopPolicy, AgreementTakesTheStrongestCode) {
  const StopPolicy p(deadline_settings(), true);
  const auto deadline = p.decide(0, kDeadline, 1.0, 0.0);
  ASSERT_EQ(deadline.code, StopPolicy::kDeadline);
  EXPECT_EQ(p.agreed_reason(deadline, StopPolicy::kDeadline), "deadline (--time-limit)");
  const StopPolicy::Decision signal{StopPolicy::kSignal, "signal 2", ""};
  EXPECT_EQ(p.agreed_reason(signal, StopPolicy::kDeadline), "deadline (--time-limit)");
  EXPECT_EQ(p.agreed_reason(signal, StopPolicy::kSignal), "signal 2");
}

}  // namespace
}  // namespace gtrain
