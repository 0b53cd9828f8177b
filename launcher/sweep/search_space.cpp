// search_space.cpp: reading [search] / [sweep] and drawing the trials.
#include "launcher/sweep/search_space.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>

#include "runtime/core/errors.h"

namespace gtrain {
namespace {

// "FILE:LINE:COL" of a node (the file alone when toml++ has no position).
std::string where(const std::string& path, const toml::node& n) {
  const auto& s = n.source();
  if (s.begin.line == 0) return path;
  return path + ":" + std::to_string(s.begin.line) + ":" + std::to_string(s.begin.column);
}

double number(const std::string& path, const std::string& key, const toml::node& n) {
  if (auto v = n.value<double>()) return *v;
  throw ConfigError(where(path, n) + ": " + key + ": expected a number");
}

nlohmann::json to_json(const std::string& path, const std::string& key, const toml::node& n) {
  if (n.is_integer()) return *n.value<int64_t>();
  if (n.is_floating_point()) return *n.value<double>();
  if (n.is_boolean()) return *n.value<bool>();
  if (n.is_string()) return *n.value<std::string>();
  throw ConfigError(where(path, n) + ": " + key + ": a choice must be a number, a string or a boolean");
}

// A [lo, hi] pair of the space.
std::pair<double, double> range(const std::string& path, const std::string& key, const toml::node& n) {
  const toml::array* a = n.as_array();
  if (!a || a->size() != 2) throw ConfigError(where(path, n) + ": " + key + ": expected [low, high]");
  return {number(path, key, *a->get(0)), number(path, key, *a->get(1))};
}

// The ways a space key is drawn, as [search.space] names them.
const std::set<std::string> kDimensionKinds = {"choice", "uniform", "log_uniform", "int"};

SearchDimension dimension(const std::string& path, const std::string& key, const toml::table& spec) {
  SearchDimension d;
  d.key = key;
  std::vector<std::string> given;
  for (auto&& [k, v] : spec) given.emplace_back(k.str());
  if (given.size() != 1 || !kDimensionKinds.count(given[0])) {
    throw ConfigError(where(path, spec) + ": search.space." + key +
                      ": expected exactly one of choice = [...], uniform = [a, b], log_uniform = [a, b], int = [a, b]");
  }
  const std::string what = "search.space." + key + "." + given[0];
  const toml::node& v = *spec.get(given[0]);
  if (given[0] == "choice") {
    const toml::array* a = v.as_array();
    if (!a || a->empty()) throw ConfigError(where(path, v) + ": " + what + ": expected a non-empty list of values");
    for (const auto& c : *a) d.choices.push_back(to_json(path, what, c));
    return d;
  }
  auto [lo, hi] = range(path, what, v);
  d.lo = lo, d.hi = hi;
  if (given[0] == "int") {
    d.kind = SearchDimension::Kind::integer;
    if (lo != std::floor(lo) || hi != std::floor(hi) || lo > hi)
      throw ConfigError(where(path, v) + ": " + what + ": expected whole numbers [low, high] with low <= high");
    return d;
  }
  d.kind = given[0] == "uniform" ? SearchDimension::Kind::uniform : SearchDimension::Kind::log_uniform;
  if (!(lo < hi)) throw ConfigError(where(path, v) + ": " + what + ": the range is empty (low must be < high)");
  if (d.kind == SearchDimension::Kind::log_uniform && !(lo > 0))
    throw ConfigError(where(path, v) + ": " + what + ": a log-uniform range needs low > 0");
  return d;
}

// [search.space]: "a.b" = {...} or nested tables a.b = {...}, flattened to dotted keys.
void collect_space(const std::string& path, const std::string& prefix, const toml::table& t,
                   std::vector<SearchDimension>& out) {
  for (auto&& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    const toml::table* sub = v.as_table();
    if (!sub)
      throw ConfigError(where(path, v) + ": search.space." + key + ": expected a table such as { choice = [...] }");
    bool leaf = false;  // { choice = [...] } and the like; a nested table holds only tables
    for (auto&& [kk, vv] : *sub) leaf = leaf || kDimensionKinds.count(std::string(kk.str())) || !vv.is_table();
    if (leaf) {
      out.push_back(dimension(path, key, *sub));
    } else {
      collect_space(path, key, *sub, out);
    }
  }
}

template <class T>
T get_or(const std::string& path, const toml::table& t, const std::string& table, const std::string& key, T fallback) {
  const toml::node* n = t.get(key);
  if (!n) return fallback;
  if (auto v = n->value<T>()) return *v;
  throw ConfigError(where(path, *n) + ": " + table + "." + key + ": expected " +
                    (std::is_same_v<T, std::string> ? "a string" : "a number"));
}

void check_keys(const std::string& path, const toml::table& t, const std::string& table,
                const std::vector<std::string>& known) {
  for (auto&& [k, v] : t) {
    const std::string key(k.str());
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw ConfigError(where(path, v) + ": unknown key '" + key + "' in [" + table + "]");
  }
}

SearchConfig read_search(const std::string& path, const toml::table& t) {
  check_keys(path, t, "search",
             {"method", "trials", "metric", "mode", "seed", "eta", "min_steps", "max_steps", "space"});
  SearchConfig s;
  s.method = get_or<std::string>(path, t, "search", "method", s.method);
  s.trials = get_or<int64_t>(path, t, "search", "trials", 0);
  s.metric = get_or<std::string>(path, t, "search", "metric", s.metric);
  s.mode = get_or<std::string>(path, t, "search", "mode", s.metric == "eval_accuracy" ? "max" : "min");
  s.seed = static_cast<uint64_t>(get_or<int64_t>(path, t, "search", "seed", 0));
  s.eta = get_or<int64_t>(path, t, "search", "eta", s.eta);
  s.min_steps = get_or<int64_t>(path, t, "search", "min_steps", 0);
  s.max_steps = get_or<int64_t>(path, t, "search", "max_steps", 0);
  const auto bad = [&](const char* key, const std::string& expected) {
    const toml::node* n = t.get(key);
    throw ConfigError((n ? where(path, *n) : path) + ": search." + key + ": " + expected);
  };
  if (s.method != "grid" && s.method != "random" && s.method != "asha")
    bad("method", "expected \"grid\", \"random\" or \"asha\", got \"" + s.method + "\"");
  if (s.metric != "eval_loss" && s.metric != "eval_accuracy" && s.metric != "train_loss")
    bad("metric", "expected \"eval_loss\", \"eval_accuracy\" or \"train_loss\", got \"" + s.metric + "\"");
  if (s.mode != "min" && s.mode != "max") bad("mode", "expected \"min\" or \"max\", got \"" + s.mode + "\"");
  if (s.method != "grid" && s.trials < 1)
    bad("trials", "expected a number of trials >= 1 for method \"" + s.method + "\"");
  if (s.eta < 2) bad("eta", "expected eta >= 2 (got " + std::to_string(s.eta) + ")");
  if (s.min_steps < 0) bad("min_steps", "expected >= 0");
  if (s.max_steps < 0) bad("max_steps", "expected >= 0");
  const toml::table* space = t["space"].as_table();
  if (!space || space->empty()) bad("space", "expected a [search.space] table with at least one key");
  collect_space(path, "", *space, s.space);
  std::sort(s.space.begin(), s.space.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  for (const auto& d : s.space) {
    if (s.method == "grid" &&
        (d.kind == SearchDimension::Kind::uniform || d.kind == SearchDimension::Kind::log_uniform))
      throw ConfigError(path + ": search.space." + d.key + ": a grid takes choice or int ranges, not a continuous one");
  }
  return s;
}

SweepOptions read_sweep(const std::string& path, const toml::table& t) {
  check_keys(path, t, "sweep", {"gpus_per_trial", "trials_per_gpu", "max_failures"});
  SweepOptions o;
  o.gpus_per_trial = get_or<int64_t>(path, t, "sweep", "gpus_per_trial", o.gpus_per_trial);
  o.trials_per_gpu = get_or<int64_t>(path, t, "sweep", "trials_per_gpu", o.trials_per_gpu);
  o.max_failures = get_or<int64_t>(path, t, "sweep", "max_failures", o.max_failures);
  if (o.gpus_per_trial < 0) throw ConfigError(path + ": sweep.gpus_per_trial: expected >= 0 (0 = the fewest that fit)");
  if (o.trials_per_gpu < 1) throw ConfigError(path + ": sweep.trials_per_gpu: expected >= 1");
  if (o.max_failures < 0) throw ConfigError(path + ": sweep.max_failures: expected >= 0 (0 = no limit)");
  return o;
}

// Each space key against the job: a key it has, and values (both ends of a range, every choice) it
// accepts.
void check_space_against_job(const SweepFile& f, const std::vector<std::string>& sets,
                             const std::map<std::string, std::string>& env) {
  const auto fields = flat_fields(f.base);
  for (const auto& d : f.search.space) {
    if (!fields.count(d.key)) {
      throw ConfigError(f.path + ": search.space." + d.key + ": not a job config key",
                        "name keys as gtrain config reference lists them, e.g. optimizer.learning_rate");
    }
    std::vector<nlohmann::json> values = d.choices;
    if (values.empty()) {
      if (d.kind == SearchDimension::Kind::integer) {
        values = {static_cast<int64_t>(d.lo), static_cast<int64_t>(d.hi)};
      } else {
        values = {d.lo, d.hi};
      }
    }
    for (const auto& v : values) {
      std::vector<std::string> with = sets;
      with.push_back(set_argument(d.key, v));
      try {
        load_job_config(f.path, with, env);
      } catch (const ConfigError& e) {
        throw ConfigError(f.path + ": search.space." + d.key + " = " + v.dump() + ": the job refuses it: " + e.what());
      }
    }
  }
}

// A double in [0, 1) from 53 bits of the generator (the same on every platform, unlike
// std::uniform_real_distribution).
double unit(std::mt19937_64& g) {
  return static_cast<double>(g() >> 11) * 0x1.0p-53;
}

nlohmann::json draw(const SearchDimension& d, std::mt19937_64& g) {
  switch (d.kind) {
    case SearchDimension::Kind::choice:
      return d.choices[static_cast<size_t>(unit(g) * static_cast<double>(d.choices.size()))];
    case SearchDimension::Kind::uniform:
      return d.lo + (d.hi - d.lo) * unit(g);
    case SearchDimension::Kind::log_uniform:
      return std::exp(std::log(d.lo) + (std::log(d.hi) - std::log(d.lo)) * unit(g));
    case SearchDimension::Kind::integer: {
      const auto n = static_cast<double>(static_cast<int64_t>(d.hi) - static_cast<int64_t>(d.lo) + 1);
      return static_cast<int64_t>(d.lo) + static_cast<int64_t>(unit(g) * n);
    }
  }
  return nullptr;
}

// A dimension's grid values.
std::vector<nlohmann::json> grid_values(const SearchDimension& d) {
  if (d.kind == SearchDimension::Kind::choice) return d.choices;
  std::vector<nlohmann::json> out;
  for (auto v = static_cast<int64_t>(d.lo); v <= static_cast<int64_t>(d.hi); ++v) out.push_back(v);
  return out;
}

}  // namespace

SweepFile load_sweep_file(const std::string& path, const std::vector<std::string>& sets,
                          const std::map<std::string, std::string>& env) {
  SweepFile f;
  f.path = path;
  f.base = load_job_config(path, sets, env);  // the file's TOML and the job's keys, errors by line
  toml::table root = toml::parse_file(path);
  const toml::table* search = root["search"].as_table();
  if (!search) {
    throw ConfigError(path + ": no [search] table: a sweep file is a job config plus [search]",
                      "add [search] with method and [search.space]; docs/sweeps.md");
  }
  f.search = read_search(path, *search);
  if (const toml::table* sweep = root["sweep"].as_table()) f.sweep = read_sweep(path, *sweep);
  if (f.search.max_steps == 0) f.search.max_steps = f.base.train.steps;
  if (f.search.max_steps <= 0) {
    throw ConfigError(path + ": search.max_steps: set it, or train.steps (a sweep's trials need a length in steps)");
  }
  if (f.search.min_steps > f.search.max_steps) {
    throw ConfigError(path + ": search.min_steps = " + std::to_string(f.search.min_steps) +
                      " exceeds search.max_steps = " + std::to_string(f.search.max_steps));
  }
  check_space_against_job(f, sets, env);
  return f;
}

std::vector<TrialSpec> make_trials(const SearchConfig& search) {
  std::vector<TrialSpec> out;
  if (search.method == "grid") {
    std::vector<std::vector<nlohmann::json>> axes;
    for (const auto& d : search.space) axes.push_back(grid_values(d));
    std::vector<size_t> at(axes.size(), 0);
    for (int64_t id = 0;; ++id) {
      TrialSpec t;
      t.id = id;
      for (size_t i = 0; i < axes.size(); ++i) t.params.emplace_back(search.space[i].key, axes[i][at[i]]);
      out.push_back(std::move(t));
      size_t i = axes.size();
      while (i > 0 && ++at[i - 1] == axes[i - 1].size()) at[--i] = 0;
      if (i == 0) return out;
    }
  }
  std::mt19937_64 g(search.seed);
  for (int64_t id = 0; id < search.trials; ++id) {
    TrialSpec t;
    t.id = id;
    for (const auto& d : search.space) t.params.emplace_back(d.key, draw(d, g));
    out.push_back(std::move(t));
  }
  return out;
}

std::string set_argument(const std::string& key, const nlohmann::json& value) {
  if (value.is_number_float()) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", value.get<double>());
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // a float, as TOML reads it
    return key + "=" + s;
  }
  return key + "=" + value.dump();  // integers, booleans; strings quoted as TOML basic strings
}

}  // namespace gtrain
