// sweep_ledger.cpp: sweep.json's fields, read and written.
#include "launcher/sweep/sweep_ledger.h"

#include <cstdio>
#include <filesystem>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/run_files.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

constexpr TrialState kStates[] = {TrialState::pending, TrialState::running, TrialState::paused,
                                  TrialState::stopped, TrialState::done,    TrialState::failed};

TrialState state_named(const std::string& s, const std::string& path) {
  for (TrialState t : kStates) {
    if (s == name_of(t)) return t;
  }
  throw ConfigError(path + ": unknown trial state \"" + s + "\"",
                    "the ledger is damaged: start the sweep in a new directory");
}

nlohmann::json params_json(const std::vector<std::pair<std::string, nlohmann::json>>& params) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [k, v] : params) j.push_back({k, v});
  return j;
}

}  // namespace

const char* name_of(TrialState s) {
  switch (s) {
    case TrialState::pending:
      return "pending";
    case TrialState::running:
      return "running";
    case TrialState::paused:
      return "paused";
    case TrialState::stopped:
      return "stopped";
    case TrialState::done:
      return "done";
    case TrialState::failed:
      return "failed";
  }
  return "?";
}

std::string TrialRecord::reached_result() const {
  const int64_t k = reached_rung();
  return k < 0 ? "-" : strf("%.6g", *results[static_cast<size_t>(k)]);
}

std::string TrialRecord::name() const {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "t%03lld", static_cast<long long>(id));
  return buf;
}

nlohmann::json SweepLedger::to_json() const {
  nlohmann::json rj = nlohmann::json::array();
  for (const auto& r : rungs) rj.push_back({{"steps", r.steps}, {"size", r.size}});
  nlohmann::json tj = nlohmann::json::array();
  for (const auto& t : trials) {
    nlohmann::json res = nlohmann::json::array();
    for (const auto& r : t.results) res.push_back(r ? nlohmann::json(*r) : nlohmann::json(nullptr));
    tj.push_back({{"id", t.id},
                  {"name", t.name()},
                  {"params", params_json(t.params)},
                  {"state", name_of(t.state)},
                  {"results", res},
                  {"steps", t.steps},
                  {"target_rung", t.target_rung},
                  {"rank_seconds", t.rank_seconds},
                  {"pause_rank_seconds", t.pause_rank_seconds},
                  {"runs", t.runs},
                  {"failure", t.failure}});
  }
  nlohmann::json pj = nlohmann::json::array();
  for (const auto& p : promotions) pj.push_back({{"trial", p.trial}, {"to_rung", p.to_rung}});
  return {{"gtrain_sweep", version},
          {"sweep_file", sweep_file},
          {"method", method},
          {"metric", metric},
          {"mode", mode},
          {"eta", eta},
          {"rungs", rj},
          {"trials", tj},
          {"promotions", pj},
          {"failures", failures},
          {"best", best},
          {"finished", finished},
          {"stop_reason", stop_reason}};
}

SweepLedger SweepLedger::from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object() || !j.contains("gtrain_sweep")) {
    throw ConfigError(path + ": not a gtrain sweep ledger", "give gtrain sweep a directory of its own (--dir)");
  }
  SweepLedger l;
  try {
    l.version = j.at("gtrain_sweep").get<int>();
    l.sweep_file = j.at("sweep_file").get<std::string>();
    l.method = j.at("method").get<std::string>();
    l.metric = j.at("metric").get<std::string>();
    l.mode = j.at("mode").get<std::string>();
    l.eta = j.at("eta").get<int64_t>();
    for (const auto& r : j.at("rungs")) l.rungs.push_back({r.at("steps").get<int64_t>(), r.at("size").get<int64_t>()});
    for (const auto& tj : j.at("trials")) {
      TrialRecord t;
      t.id = tj.at("id").get<int64_t>();
      for (const auto& p : tj.at("params")) t.params.emplace_back(p.at(0).get<std::string>(), p.at(1));
      t.state = state_named(tj.at("state").get<std::string>(), path);
      for (const auto& r : tj.at("results"))
        t.results.push_back(r.is_null() ? std::nullopt : std::optional<double>(r.get<double>()));
      t.steps = tj.at("steps").get<int64_t>();
      t.target_rung = tj.at("target_rung").get<int64_t>();
      t.rank_seconds = tj.at("rank_seconds").get<double>();
      t.pause_rank_seconds = tj.at("pause_rank_seconds").get<double>();
      t.runs = tj.at("runs").get<int64_t>();
      t.failure = tj.at("failure").get<std::string>();
      l.trials.push_back(std::move(t));
    }
    for (const auto& p : j.at("promotions"))
      l.promotions.push_back({p.at("trial").get<int64_t>(), p.at("to_rung").get<int64_t>()});
    l.failures = j.at("failures").get<int64_t>();
    l.best = j.at("best").get<int64_t>();
    l.finished = j.at("finished").get<bool>();
    l.stop_reason = j.at("stop_reason").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": damaged sweep ledger (" + e.what() + ")", "start the sweep in a new directory");
  }
  return l;
}

std::vector<TrialResults> SweepLedger::results() const {
  std::vector<TrialResults> out;
  for (const auto& t : trials) {
    TrialResults r;
    r.result = t.results;
    r.result.resize(rungs.size());
    r.failed = t.state == TrialState::failed;
    r.failed_rung = r.failed ? t.target_rung : -1;
    out.push_back(std::move(r));
  }
  return out;
}

SweepLedger::Totals SweepLedger::totals() const {
  Totals t;
  for (TrialState s : kStates) t.counts[name_of(s)] = 0;
  for (const auto& x : trials) {
    ++t.counts[name_of(x.state)];
    t.rank_s += x.rank_seconds, t.outside_s += x.pause_rank_seconds;
  }
  return t;
}

std::string SweepLedger::rungs_text() const {
  std::string steps, sizes;
  for (const auto& r : rungs) {
    steps += (steps.empty() ? "" : "/") + std::to_string(r.steps);
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(r.size);
  }
  return steps + " steps holding " + sizes;
}

SweepLedger new_ledger(const SweepFile& f) {
  SweepLedger l;
  l.sweep_file = fs::absolute(f.path).string();
  l.method = f.search.method, l.metric = f.search.metric, l.mode = f.search.mode, l.eta = f.search.eta;
  const auto specs = make_trials(f.search);
  l.rungs = make_rungs(f.search.method == "asha", static_cast<int64_t>(specs.size()), f.search.eta, f.search.min_steps,
                       f.search.max_steps);
  for (const auto& s : specs) {
    TrialRecord t;
    t.id = s.id;
    t.params = s.params;
    t.results.assign(l.rungs.size(), std::nullopt);
    l.trials.push_back(std::move(t));
  }
  return l;
}

std::string sweep_ledger_path(const std::string& sweep_dir) {
  return (fs::path(sweep_dir) / "sweep.json").string();
}

std::string trial_run_dir(const std::string& sweep_dir, const TrialRecord& t) {
  return (fs::path(sweep_dir) / "trials" / t.name()).string();
}

std::string trial_log_path(const std::string& sweep_dir, const TrialRecord& t) {
  return (fs::path(sweep_dir) / "logs" / (t.name() + ".log")).string();
}

std::optional<SweepLedger> read_sweep_ledger(const std::string& sweep_dir) {
  const std::string path = sweep_ledger_path(sweep_dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const nlohmann::json j = read_json_file(path);
  if (j.is_null()) throw ConfigError(path + ": not a JSON object", "start the sweep in a new directory");
  return SweepLedger::from_json(j, path);
}

void write_sweep_ledger(const std::string& sweep_dir, const SweepLedger& l) {
  write_json_file(sweep_ledger_path(sweep_dir), l.to_json());
}

}  // namespace gtrain
