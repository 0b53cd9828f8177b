// test_sweep.cpp: `gtrain sweep`'s torch-free rules (issue 52): the sweep file's [search] read and
// refused by line and key, the trial lists each method makes from its seed, ASHA's rungs and
// decisions (the same promotions and best trial whatever order the results arrive in, equal to
// synchronous successive halving's), and the ledger read back equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "launcher/sweep/asha.h"
#include "launcher/sweep/search_space.h"
#include "launcher/sweep/sweep_ledger.h"
#include "launcher/sweep/sweep_runner.h"
#include "runtime/core/errors.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

const std::string kJob =
    "[model]\nname = \"gpt\"\nn_layer = 1\nn_embd = 16\nn_head = 2\nseq_len = 16\n"
    "[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = 8\nsteps = 27\n";

SweepFile load(const test::TempDir& d, const std::string& search) {
  test::write_file(d.file("s.toml"), kJob + search);
  return load_sweep_file(d.file("s.toml"), {}, {});
}

std::string error_of(const test::TempDir& d, const std::string& search) {
  try {
    load(d, search);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SweepSpace, RandomTrialsComeFromTheSeedAlone) {
  test::TempDir d;
  const std::string search =
      "[search]\nmethod = \"random\"\ntrials = 50\nseed = 7\n[search.space]\n"
      "\"optimizer.learning_rate\" = { log_uniform = [1e-4, 1e-1] }\n"
      "[search.space.train]\nwarmup_steps = { int = [0, 4] }\n"
      "[search.space.optimizer]\nweight_decay = { choice = [0.0, 0.1, 0.2] }\n";
  const SweepFile f = load(d, search);
  ASSERT_EQ(f.search.space.size(), 3u);
  EXPECT_EQ(f.search.space[0].key, "optimizer.learning_rate");  // key order
  EXPECT_EQ(f.search.max_steps, 27);                            // train.steps
  const auto a = make_trials(f.search), b = make_trials(f.search);
  ASSERT_EQ(a.size(), 50u);
  std::set<int64_t> warmups;
  std::set<double> decays;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].params, b[i].params);
    const double lr = a[i].params[0].second.get<double>();
    EXPECT_GE(lr, 1e-4);
    EXPECT_LT(lr, 1e-1);
    decays.insert(a[i].params[1].second.get<double>());  // optimizer.weight_decay, then train.warmup_steps
    warmups.insert(a[i].params[2].second.get<int64_t>());
  }
  EXPECT_EQ(warmups, (std::set<int64_t>{0, 1, 2, 3, 4}));  // 50 draws reach every value
  EXPECT_EQ(decays, (std::set<double>{0.0, 0.1, 0.2}));
  // The draws are pinned: the same seed gives these numbers on every machine.
  EXPECT_EQ(set_argument("optimizer.learning_rate", a[0].params[0].second).rfind("optimizer.learning_rate=0.", 0), 0u);
  SearchConfig other = f.search;
  other.seed = 8;
  EXPECT_NE(make_trials(other)[0].params, a[0].params);
  // A learning rate spread over the log range: about as many below 1e-2.5 as above.
  int64_t low = 0;
  for (const auto& t : a) low += t.params[0].second.get<double>() < std::pow(10.0, -2.5);
  EXPECT_GT(low, 10);
  EXPECT_LT(low, 40);
}

TEST(SweepSpace, GridIsEveryCombinationLastKeyFastest) {
  test::TempDir d;
  const SweepFile f = load(d,
                           "[search]\nmethod = \"grid\"\n[search.space]\n"
                           "\"optimizer.learning_rate\" = { choice = [0.01, 0.1] }\n"
                           "\"train.warmup_steps\" = { int = [0, 2] }\n");
  const auto t = make_trials(f.search);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].params[0].second, 0.01);
  EXPECT_EQ(t[0].params[1].second, 0);
  EXPECT_EQ(t[1].params[1].second, 1);
  EXPECT_EQ(t[3].params[0].second, 0.1);
  EXPECT_EQ(t[5].params[1].second, 2);
  EXPECT_EQ(set_argument("train.warmup_steps", 2), "train.warmup_steps=2");
  EXPECT_EQ(set_argument("optimizer.learning_rate", 1.0), "optimizer.learning_rate=1.0");
  EXPECT_EQ(set_argument("data.chat_template", "chatml"), "data.chat_template=\"chatml\"");
}

// Each mistake is one ConfigError naming the file, and the line or key.
TEST(SweepSpace, BadSearchIsOneLineNamingTheKey) {
  test::TempDir d;
  const std::string file = d.file("s.toml");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[search]\nmethod = \"asha\"\ntrials = 9\n[search.space]\n\"optimizer.lr\" = { uniform = [0.1, 0.2] }\n",
       file + ": search.space.optimizer.lr: not a job config key"},
      {"[search]\nmethod = \"random\"\ntrials = 9\n[search.space]\n"
       "\"optimizer.learning_rate\" = { uniform = [0.2, 0.2] }\n",
       file + ":16:41: search.space.optimizer.learning_rate.uniform: the range is empty (low must be < high)"},
      {"[search]\nmethod = \"asha\"\ntrials = 9\neta = 1\n[search.space]\n"
       "\"optimizer.learning_rate\" = { uniform = [0.1, 0.2] }\n",
       file + ":15:7: search.eta: expected eta >= 2 (got 1)"},
      {"[search]\nmethod = \"grid\"\n[search.space]\n\"optimizer.learning_rate\" = { uniform = [0.1, 0.2] }\n",
       "search.space.optimizer.learning_rate: a grid takes choice or int ranges"},
      {"[search]\nmethod = \"random\"\ntrials = 2\n[search.space]\n\"train.global_batch\" = { int = [0, 8] }\n",
       file + ": search.space.train.global_batch = 0: the job refuses it"},
      {"[search]\nmethod = \"random\"\n[search.space]\n\"train.seed\" = { int = [0, 8] }\n",
       "search.trials: expected a number of trials >= 1"},
      {"[search]\nmethod = \"bayes\"\ntrials = 2\n[search.space]\n\"train.seed\" = { int = [0, 8] }\n",
       "search.method: expected \"grid\", \"random\" or \"asha\", got \"bayes\""},
      {"[search]\nmethod = \"random\"\ntrials = 2\n[search.space]\n\"train.seed\" = { range = [0, 8] }\n",
       "search.space.train.seed: expected exactly one of choice"},
      {"[search]\nmethod = \"random\"\ntrials = 2\nspace = {}\n", "search.space: expected a [search.space] table"},
      {"[search]\nmethod = \"random\"\ntrials = 2\nrungs = 3\n[search.space]\n\"train.seed\" = { int = [0, 8] }\n",
       file + ":15:9: unknown key 'rungs' in [search]"},
  };
  for (const auto& [search, want] : cases) {
    const std::string got = error_of(d, search);
    EXPECT_NE(got.find(want), std::string::npos) << search << "\ngot: " << got;
    EXPECT_EQ(got.find('\n'), std::string::npos) << got;
  }
}

TEST(SweepAsha, RungsOfSuccessiveHalving) {
  const auto r = make_rungs(true, 27, 3, 1, 27);
  ASSERT_EQ(r.size(), 4u);
  const std::vector<int64_t> steps = {r[0].steps, r[1].steps, r[2].steps, r[3].steps};
  const std::vector<int64_t> sizes = {r[0].size, r[1].size, r[2].size, r[3].size};
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 3, 9, 27}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{27, 9, 3, 1}));
  const auto d = make_rungs(true, 10, 2, 0, 64);  // min_steps 0: 64 / 2^3 = 8
  EXPECT_EQ(d.front().steps, 8);
  EXPECT_EQ(d.back().steps, 64);
  EXPECT_EQ(d.back().size, 1);
  const auto flat = make_rungs(false, 5, 3, 0, 10);
  ASSERT_EQ(flat.size(), 1u);
  EXPECT_EQ(flat[0].steps, 10);
}

// A simulated sweep: `metric(trial, rung)` is what a trial reports; results arrive in an order drawn
// from `order_seed` among the runs that may go (ASHA's asynchrony), with `slots` at once. Returns
// the promotions (trial, rung) as a set and the best trial.
std::pair<std::set<std::pair<int64_t, int64_t>>, int64_t> simulate(const std::vector<Rung>& rungs, int64_t n,
                                                                   uint64_t order_seed, size_t slots,
                                                                   const std::set<int64_t>& fails) {
  std::vector<TrialResults> t(static_cast<size_t>(n));
  for (auto& x : t) x.result.assign(rungs.size(), std::nullopt);
  std::mt19937_64 g(order_seed);
  auto metric = [](int64_t trial, int64_t rung) {
    return std::fmod(static_cast<double>(trial) * 0.618033988749895, 1.0) + 0.01 * static_cast<double>(rung);
  };
  std::vector<std::pair<size_t, int64_t>> in_flight;  // (trial, target rung)
  std::set<std::pair<int64_t, int64_t>> promotions;
  for (int guard = 0; guard < 100000; ++guard) {
    const SearchDecisions d = decide(rungs, t, "min");
    for (size_t i = 0; i < t.size(); ++i) {
      if (d.fate[i] == TrialFate::promote) promotions.insert({static_cast<int64_t>(i), d.rung[i] + 1});
    }
    if (d.finished) return {promotions, best_trial(t, "min")};
    std::vector<std::pair<size_t, int64_t>> ready;
    for (size_t i = 0; i < t.size(); ++i) {
      const bool busy = std::any_of(in_flight.begin(), in_flight.end(), [&](const auto& f) { return f.first == i; });
      if (busy) continue;
      if (d.fate[i] == TrialFate::run) ready.push_back({i, 0});
      if (d.fate[i] == TrialFate::promote) ready.push_back({i, d.rung[i] + 1});
    }
    std::shuffle(ready.begin(), ready.end(), g);
    while (in_flight.size() < slots && !ready.empty()) {
      in_flight.push_back(ready.back());
      ready.pop_back();
    }
    if (in_flight.empty()) return {promotions, -2};  // stuck: a bug
    const size_t k = static_cast<size_t>(g() % in_flight.size());
    const auto [trial, rung] = in_flight[k];
    in_flight.erase(in_flight.begin() + static_cast<std::ptrdiff_t>(k));
    if (fails.count(static_cast<int64_t>(trial)) && rung == 1) {
      t[trial].failed = true;
      t[trial].failed_rung = 1;
    } else {
      t[trial].result[static_cast<size_t>(rung)] = metric(static_cast<int64_t>(trial), rung);
    }
  }
  return {promotions, -3};
}

// Synchronous successive halving: each rung complete, then its best 1 / eta go on.
std::set<std::pair<int64_t, int64_t>> synchronous(const std::vector<Rung>& rungs, int64_t n) {
  std::set<std::pair<int64_t, int64_t>> out;
  std::vector<int64_t> alive(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) alive[static_cast<size_t>(i)] = i;
  for (size_t k = 0; k + 1 < rungs.size(); ++k) {
    std::sort(alive.begin(), alive.end(), [&](int64_t a, int64_t b) {
      const double ma = std::fmod(a * 0.618033988749895, 1.0) + 0.01 * k,
                   mb = std::fmod(b * 0.618033988749895, 1.0) + 0.01 * k;
      return ma != mb ? ma < mb : a < b;
    });
    alive.resize(static_cast<size_t>(rungs[k + 1].size));
    for (int64_t a : alive) out.insert({a, static_cast<int64_t>(k + 1)});
  }
  return out;
}

TEST(SweepAsha, PromotionsDoNotDependOnOrderOrConcurrency) {
  const auto rungs = make_rungs(true, 27, 3, 1, 27);
  const auto want = synchronous(rungs, 27);
  ASSERT_EQ(want.size(), 9u + 3u + 1u);
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const size_t slots = 1 + seed % 5;
    const auto [got, best] = simulate(rungs, 27, seed, slots, {});
    EXPECT_EQ(got, want) << "order " << seed << ", " << slots << " at once";
    ASSERT_GE(best, 0);
    EXPECT_TRUE(want.count({best, 3})) << best;
  }
}

// A trial that fails at a rung ranks last there and never goes on; the rest go on as without it.
TEST(SweepAsha, FailedTrialsRankLastAndTheSearchFinishes) {
  const auto rungs = make_rungs(true, 9, 3, 1, 9);
  const auto base = simulate(rungs, 9, 1, 3, {});
  const int64_t promoted = base.first.begin()->first;  // a trial that reaches rung 1
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const auto [got, best] = simulate(rungs, 9, seed, 2, {promoted});
    EXPECT_GE(best, 0) << "the search finished with a failure";
    EXPECT_FALSE(got.count({promoted, 2}));
    EXPECT_NE(best, promoted);
  }
}

// sweep.gpus_per_trial = 0: the fewest of 1, 2, 4, ... ranks the planner fits, up to the pool.
TEST(SweepPool, TrialsTakeTheFewestRanksThatFit) {
  EXPECT_EQ(ranks_per_trial(0, 8, [](int64_t n) { return n >= 3; }), 4);
  EXPECT_EQ(ranks_per_trial(0, 8, [](int64_t) { return true; }), 1);
  EXPECT_EQ(ranks_per_trial(0, 2, [](int64_t n) { return n >= 3; }), 0);  // nothing in the pool fits
  EXPECT_EQ(ranks_per_trial(2, 8, [](int64_t) { return false; }), 2);     // given: taken as it is
  EXPECT_EQ(ranks_per_trial(0, 8, nullptr), 1);
}

TEST(SweepLedgerFile, RoundTripsAndRefusesAnotherFile) {
  test::TempDir d;
  const SweepFile f = load(d,
                           "[search]\nmethod = \"asha\"\ntrials = 9\nmin_steps = 3\n[search.space]\n"
                           "\"optimizer.learning_rate\" = { log_uniform = [1e-4, 1e-1] }\n");
  SweepLedger l = new_ledger(f);
  ASSERT_EQ(l.trials.size(), 9u);
  ASSERT_EQ(l.rungs.size(), 3u);  // 3, 9, 27
  l.trials[2].state = TrialState::failed;
  l.trials[2].failure = "diverged";
  l.trials[1].results[0] = 2.5;
  l.trials[1].rank_seconds = 12.25;
  l.promotions.push_back({1, 1});
  l.best = 1;
  write_sweep_ledger(d.path(), l);
  const auto back = read_sweep_ledger(d.path());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->to_json(), l.to_json());
  EXPECT_EQ(back->trials[2].state, TrialState::failed);
  EXPECT_EQ(*back->trials[1].results[0], 2.5);
  EXPECT_EQ(trial_run_dir(d.path(), back->trials[1]), d.file("trials/t001"));
  test::write_file(d.file("sweep.json"), "{\"something\": 1}");
  try {
    read_sweep_ledger(d.path());
    FAIL() << "read another program's file";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not a gtrain sweep ledger"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(read_sweep_ledger(d.file("nothing")));
}

}  // namespace
}  // namespace gtrain
