// asha.cpp: rungs, promotions that do not depend on timing, the best trial.
#include "launcher/sweep/asha.h"

#include <algorithm>

namespace gtrain {
namespace {

// Whether a result `a` (trial ia) ranks before `b` (trial ib): the better metric, then the lower id.
bool ranks_before(double a, int64_t ia, double b, int64_t ib, bool min) {
  if (a != b) return min ? a < b : a > b;
  return ia < ib;
}

// Per rung: results reported there (successes and failures on the way to it), and successes.
struct RungCounts {
  std::vector<int64_t> reported, succeeded;
};

RungCounts count(const std::vector<Rung>& rungs, const std::vector<TrialResults>& trials) {
  RungCounts c;
  c.reported.assign(rungs.size(), 0);
  c.succeeded.assign(rungs.size(), 0);
  for (const auto& t : trials) {
    for (size_t k = 0; k < rungs.size(); ++k) {
      const bool ok = k < t.result.size() && t.result[k].has_value();
      const bool failed_here = t.failed && t.failed_rung == static_cast<int64_t>(k);
      c.reported[k] += ok || failed_here;
      c.succeeded[k] += ok;
    }
  }
  return c;
}

// Trials that will ever report at each rung: all of them at the first; at rung k the promotions out
// of k - 1, its size, fewer only once k - 1 is complete with fewer successes than that.
std::vector<int64_t> expected(const std::vector<Rung>& rungs, const RungCounts& c, int64_t trials) {
  std::vector<int64_t> e(rungs.size(), 0);
  for (size_t k = 0; k < rungs.size(); ++k) {
    if (k == 0) {
      e[k] = trials;
      continue;
    }
    e[k] = rungs[k].size;
    if (c.reported[k - 1] >= e[k - 1]) e[k] = std::min(e[k], c.succeeded[k - 1]);
  }
  return e;
}

}  // namespace

int64_t highest_rung(const std::vector<std::optional<double>>& results) {
  int64_t k = -1;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i]) k = static_cast<int64_t>(i);
  }
  return k;
}

std::vector<Rung> make_rungs(bool asha, int64_t trials, int64_t eta, int64_t min_steps, int64_t max_steps) {
  std::vector<Rung> out;
  if (!asha) return {{max_steps, trials}};
  if (min_steps <= 0) min_steps = std::max<int64_t>(1, max_steps / (eta * eta * eta));
  int64_t size = trials;
  for (int64_t s = min_steps; s < max_steps; s *= eta) {
    out.push_back({s, size});
    size = std::max<int64_t>(1, size / eta);
  }
  out.push_back({max_steps, size});
  return out;
}

SearchDecisions decide(const std::vector<Rung>& rungs, const std::vector<TrialResults>& trials,
                       const std::string& mode) {
  const bool min = mode != "max";
  const int64_t last = static_cast<int64_t>(rungs.size()) - 1;
  const RungCounts c = count(rungs, trials);
  const std::vector<int64_t> e = expected(rungs, c, static_cast<int64_t>(trials.size()));
  SearchDecisions d;
  d.fate.assign(trials.size(), TrialFate::wait);
  d.rung.assign(trials.size(), -1);
  d.finished = true;
  for (size_t i = 0; i < trials.size(); ++i) {
    const TrialResults& t = trials[i];
    const int64_t k = highest_rung(t.result);
    d.rung[i] = k;
    TrialFate& f = d.fate[i];
    if (t.failed || k == last) {
      f = TrialFate::done;
    } else if (k < 0) {
      f = TrialFate::run;
    } else {
      // Rung k's results better than this one's, and those still to come (any of which may be).
      const double mine = *t.result[static_cast<size_t>(k)];
      int64_t better = 0;
      for (size_t j = 0; j < trials.size(); ++j) {
        const auto& o = trials[j];
        if (j == i || static_cast<size_t>(k) >= o.result.size() || !o.result[static_cast<size_t>(k)]) continue;
        better += ranks_before(*o.result[static_cast<size_t>(k)], static_cast<int64_t>(j), mine,
                               static_cast<int64_t>(i), min);
      }
      const int64_t pending = std::max<int64_t>(0, e[static_cast<size_t>(k)] - c.reported[static_cast<size_t>(k)]);
      const int64_t slots = rungs[static_cast<size_t>(k + 1)].size;
      f = better + pending < slots ? TrialFate::promote : better >= slots ? TrialFate::stop : TrialFate::wait;
    }
    if (f != TrialFate::stop && f != TrialFate::done) d.finished = false;
  }
  return d;
}

int64_t best_trial(const std::vector<TrialResults>& trials, const std::string& mode) {
  const bool min = mode != "max";
  int64_t top = -1;
  for (const auto& t : trials) top = std::max(top, highest_rung(t.result));
  if (top < 0) return -1;
  int64_t best = -1;
  for (size_t i = 0; i < trials.size(); ++i) {
    const auto& t = trials[i];
    if (static_cast<int64_t>(t.result.size()) <= top || !t.result[static_cast<size_t>(top)]) continue;
    const double v = *t.result[static_cast<size_t>(top)];
    if (best < 0 || ranks_before(v, static_cast<int64_t>(i),
                                 *trials[static_cast<size_t>(best)].result[static_cast<size_t>(top)], best, min))
      best = static_cast<int64_t>(i);
  }
  return best;
}

}  // namespace gtrain
