// asha.h: the search's decisions as pure functions of the trials' results: ASHA's rungs (successive
// halving at steps min_steps x eta^k), which trials go on to the next rung, which stop, and the
// best trial. A trial goes on as soon as it is certainly among the top 1/eta of its rung, whatever
// the results still to come, and stops as soon as it certainly is not: every promotion is the one
// synchronous successive halving makes once the rung is complete, so the decisions never depend on
// the order or timing in which results arrive, nor on how many trials ran at once. Grid and random
// searches are one rung (the whole length) that nobody leaves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gtrain {

struct Rung {
  int64_t steps = 0;  // a trial's length when it reaches this rung
  int64_t size = 0;   // trials that reach it: the first rung all, then 1 / eta of the one before
};

// ASHA's rungs for `trials` trials: steps min_steps x eta^k below max_steps, then max_steps;
// min_steps 0 = max_steps / eta^3 (at least 1). One rung (max_steps, every trial) when `asha` is false.
std::vector<Rung> make_rungs(bool asha, int64_t trials, int64_t eta, int64_t min_steps, int64_t max_steps);

// The highest rung of `results` (a trial's metric by rung) that holds a result; -1 = none.
int64_t highest_rung(const std::vector<std::optional<double>>& results);

// A trial's results so far: its metric at each rung it finished (result[k]), or its failure.
struct TrialResults {
  std::vector<std::optional<double>> result;  // by rung; nullopt = not there yet
  bool failed = false;                        // ranks last at the rung it failed in; never goes on
  int64_t failed_rung = -1;                   // the rung it was running towards when it failed
};

enum class TrialFate { run, wait, promote, stop, done };

struct SearchDecisions {
  // Per trial: run = start (or continue) towards its next rung; wait = at a rung whose ranking is not
  // settled; promote = go on to the next rung (it then runs); stop = out, finished at its rung;
  // done = reached the last rung, or failed.
  std::vector<TrialFate> fate;
  std::vector<int64_t> rung;  // per trial: the rung it has reached (-1 = none yet)
  bool finished = false;      // every trial is stop or done
};

// Which way is better: "min" or "max".
SearchDecisions decide(const std::vector<Rung>& rungs, const std::vector<TrialResults>& trials,
                       const std::string& mode);

// The best trial: the best result at the highest rung any trial reached (ties: the lower id); -1 = none.
int64_t best_trial(const std::vector<TrialResults>& trials, const std::string& mode);

}  // namespace gtrain
