// chain_file.cpp: chain.json's fields, names and checks (see chain_file.h).
#include "runtime/core/run_dir/chain_file.h"

#include <filesystem>
#include <fstream>
#include <type_traits>

#include "runtime/core/errors.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/schedule.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

#define GTRAIN_STATE_NAME(name) #name,
constexpr const char* kStageStates[] = {GTRAIN_STAGE_STATES(GTRAIN_STATE_NAME)};
constexpr const char* kChainStates[] = {GTRAIN_CHAIN_STATES(GTRAIN_STATE_NAME)};
#undef GTRAIN_STATE_NAME

template <class E, size_t N>
std::optional<E> from_name(const char* const (&names)[N], const std::string& name) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return static_cast<E>(i);
  }
  return std::nullopt;
}

template <size_t N>
std::string name_list(const char* const (&names)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) out += (i ? ", " : "") + std::string(names[i]);
  return out;
}

}  // namespace

const char* state_name(StageState s) {
  return kStageStates[static_cast<size_t>(s)];
}
const char* state_name(ChainState s) {
  return kChainStates[static_cast<size_t>(s)];
}
std::optional<StageState> stage_state_from_name(const std::string& name) {
  return from_name<StageState>(kStageStates, name);
}
std::optional<ChainState> chain_state_from_name(const std::string& name) {
  return from_name<ChainState>(kChainStates, name);
}

nlohmann::json chain_to_json(const Chain& c) {
  nlohmann::json st = nlohmann::json::array();
  for (const auto& s : c.stages) {
    st.push_back({{"index", s.index},
                  {"gpus", s.gpus},
                  {"nodes", s.nodes},
                  {"nodes_min", s.nodes_min},
                  {"script", s.script},
                  {"submit_argv", s.submit_argv},
                  {"begin", s.begin},
                  {"job", s.job},
                  {"submitted", s.submitted},
                  {"state", state_name(s.state)},
                  {"exit", s.exit},
                  {"decision", s.decision},
                  {"account", s.account},
                  {"qos", s.qos},
                  {"shaped", s.shaped}});
  }
  nlohmann::json windows = nlohmann::json::array();
  for (const auto& w : c.windows) windows.push_back({{"days", w.days}, {"hours", w.hours}, {"max_gpus", w.max_gpus}});
  return {{"scheduler", scheduler_name(c.scheduler)},
          {"auto_stages", c.auto_stages},
          {"max_auto_stages", c.max_auto_stages},
          {"state", state_name(c.state)},
          {"reason", c.reason},
          {"stages", st},
          {"windows", windows},
          {"gpus_from_windows", c.gpus_from_windows},
          {"launcher", c.launcher},
          {"cpus_per_gpu", c.cpus_per_gpu},
          {"sizing", c.sizing.active() ? nlohmann::json({{"candidates", c.sizing.candidates},
                                                         {"gpus", c.sizing.gpus},
                                                         {"objective", c.sizing.objective},
                                                         {"slack", c.sizing.slack}})
                                       : nlohmann::json()},
          {"config", c.config},
          {"sets", c.sets},
          {"limit_s", c.limit_s},
          {"lead_s", c.lead_s}};
}

namespace {

// Key `key` of the object `obj` (`path` names it in messages), `fallback` when absent; a ConfigError
// naming the file and the key when it holds another type.
template <class T>
T field(const nlohmann::json& obj, const std::string& key, T fallback, const std::string& where,
        const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  const auto& v = *it;
  const char* expected = nullptr;
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) expected = "a string";
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) expected = "true or false";
  } else if constexpr (std::is_same_v<T, int>) {
    if (!v.is_number_integer()) expected = "an integer";
  } else if constexpr (std::is_same_v<T, double>) {
    if (!v.is_number()) expected = "a number";
  } else {
    bool ok = v.is_array();
    for (const auto& x : v) ok = ok && x.is_string();
    if (!ok) expected = "an array of strings";
  }
  if (expected) {
    throw ConfigError(where + ": key '" + path + key + "' must be " + expected + ", got " + std::string(v.type_name()));
  }
  return v.get<T>();
}

// A key holding one of the names of T's table (chain.json keeps the names, never numbers).
template <class T>
T named(const nlohmann::json& obj, const std::string& key, T fallback, const std::string& where,
        const std::string& path, const std::vector<SchedulerKind>& submitters = {}) {
  const std::string name = field(obj, key, std::string(), where, path);
  if (obj.find(key) == obj.end()) return fallback;
  std::string expected;
  if constexpr (std::is_same_v<T, SchedulerKind>) {
    const auto kind = scheduler_from_name(name);
    std::vector<SchedulerKind> allowed = submitters;
    if (allowed.empty()) {
#define GTRAIN_SCHEDULER_KIND_ENTRY(n) allowed.push_back(SchedulerKind::n);
      GTRAIN_SCHEDULER_BACKENDS(GTRAIN_SCHEDULER_KIND_ENTRY)
#undef GTRAIN_SCHEDULER_KIND_ENTRY
    }
    for (SchedulerKind k : allowed) {
      if (kind == k) return k;
      expected += (expected.empty() ? "" : ", ") + std::string(scheduler_name(k));
    }
  } else if constexpr (std::is_same_v<T, StageState>) {
    if (const auto v = stage_state_from_name(name)) return *v;
    expected = name_list(kStageStates);
  } else {
    if (const auto v = chain_state_from_name(name)) return *v;
    expected = name_list(kChainStates);
  }
  throw ConfigError(where + ": key '" + path + key + "' must be one of " + expected + ", got '" + name + "'");
}

}  // namespace

Chain chain_from_json(const nlohmann::json& j, const std::string& where, const std::vector<SchedulerKind>& submitters) {
  if (!j.is_object()) {
    throw ConfigError(where + ": must be a JSON object (as gtrain submit writes it), got " +
                      std::string(j.type_name()));
  }
  Chain c;
  c.scheduler = named(j, "scheduler", c.scheduler, where, "", submitters);
  c.auto_stages = field(j, "auto_stages", false, where, "");
  c.max_auto_stages = field(j, "max_auto_stages", c.max_auto_stages, where, "");
  c.state = named(j, "state", c.state, where, "");
  c.reason = field(j, "reason", std::string(), where, "");
  c.gpus_from_windows = field(j, "gpus_from_windows", false, where, "");
  c.launcher = field(j, "launcher", c.launcher, where, "");
  c.cpus_per_gpu = field(j, "cpus_per_gpu", 0, where, "");
  c.config = field(j, "config", std::string(), where, "");
  c.sets = field(j, "sets", std::vector<std::string>{}, where, "");
  c.limit_s = field(j, "limit_s", 0.0, where, "");
  c.lead_s = field(j, "lead_s", 0, where, "");
  if (const auto sz = j.find("sizing"); sz != j.end() && !sz->is_null()) {
    const bool ok = sz->is_object() && sz->contains("candidates") && (*sz)["candidates"].is_array();
    for (const auto& g : ok ? (*sz)["candidates"] : nlohmann::json::array()) {
      if (!g.is_number_integer() || g.get<int>() < 1)
        throw ConfigError(where + ": key 'sizing.candidates' must hold GPU counts >= 1");
      c.sizing.candidates.push_back(g.get<int>());
    }
    if (!ok || c.sizing.candidates.empty())
      throw ConfigError(where + ": key 'sizing' must be an object with a non-empty 'candidates' array");
    c.sizing.gpus = field(*sz, "gpus", c.sizing.gpus, where, "sizing.");
    c.sizing.objective = field(*sz, "objective", c.sizing.objective, where, "sizing.");
    c.sizing.slack = field(*sz, "slack", c.sizing.slack, where, "sizing.");
  }
  const auto windows = j.find("windows");
  if (windows != j.end() && !windows->is_array()) {
    throw ConfigError(where + ": key 'windows' must be an array, got " + std::string(windows->type_name()));
  }
  for (size_t i = 0; windows != j.end() && i < windows->size(); ++i) {
    const auto& w = (*windows)[i];
    const std::string at = "windows[" + std::to_string(i) + "]";
    if (!w.is_object())
      throw ConfigError(where + ": key '" + at + "' must be an object, got " + std::string(w.type_name()));
    WindowConfig x;
    x.days = field(w, "days", x.days, where, at + ".");
    x.hours = field(w, "hours", x.hours, where, at + ".");
    x.max_gpus = field(w, "max_gpus", static_cast<int>(x.max_gpus), where, at + ".");
    parse_window(x, where + ": " + at);  // checked now: chain-step must not fail on it later
    c.windows.push_back(x);
  }
  const auto stages = j.find("stages");
  if (stages != j.end() && !stages->is_array()) {
    throw ConfigError(where + ": key 'stages' must be an array, got " + std::string(stages->type_name()));
  }
  for (size_t i = 0; stages != j.end() && i < stages->size(); ++i) {
    const auto& s = (*stages)[i];
    const std::string at = "stages[" + std::to_string(i) + "]";
    if (!s.is_object())
      throw ConfigError(where + ": key '" + at + "' must be an object, got " + std::string(s.type_name()));
    ChainStage x;
    x.index = field(s, "index", 1, where, at + ".");
    x.gpus = field(s, "gpus", 1, where, at + ".");
    x.nodes = field(s, "nodes", 1, where, at + ".");
    x.nodes_min = field(s, "nodes_min", 0, where, at + ".");
    x.script = field(s, "script", std::string(), where, at + ".");
    x.submit_argv = field(s, "submit_argv", std::vector<std::string>{}, where, at + ".");
    x.begin = field(s, "begin", std::string(), where, at + ".");
    x.job = field(s, "job", std::string(), where, at + ".");
    x.submitted = field(s, "submitted", 0.0, where, at + ".");
    x.state = named(s, "state", StageState::planned, where, at + ".");
    x.exit = field(s, "exit", -1, where, at + ".");
    if (s.contains("decision") && s["decision"].is_object()) x.decision = s["decision"];
    x.account = field(s, "account", std::string(), where, at + ".");
    x.qos = field(s, "qos", std::string(), where, at + ".");
    x.shaped = field(s, "shaped", std::string(), where, at + ".");
    c.stages.push_back(x);
  }
  return c;
}

std::string chain_path(const std::string& run_dir) {
  return RunDir(run_dir).chain();
}
bool chain_exists(const std::string& run_dir) {
  return fs::exists(chain_path(run_dir));
}

Chain read_chain_file(const std::string& run_dir, const std::vector<SchedulerKind>& submitters) {
  std::ifstream f(chain_path(run_dir));
  if (!f) {
    throw ConfigError(chain_path(run_dir) + ": no chain",
                      "check that this run was submitted with gtrain submit: only a submitted run has a chain");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(chain_path(run_dir) + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  return chain_from_json(j, chain_path(run_dir), submitters);
}

void write_chain(const std::string& run_dir, const Chain& c) {
  const std::string path = chain_path(run_dir), tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << chain_to_json(c).dump(2) << "\n";
    if (!f) throw Error(tmp + ": cannot write", "check that the disk is not full and the run directory is writable");
  }
  fs::rename(tmp, path);
}

}  // namespace gtrain
