// job_config.cpp: loads a JobConfig from TOML + environment + --set overrides, with errors that
// name file:line:column, the key, and what was expected.
#include "runtime/core/config/job_config.h"
#include "runtime/core/config/model_presets.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <toml++/toml.h>

#include "runtime/core/errors.h"
#include "runtime/core/hf_config.h"
#include "runtime/core/schedule.h"

extern char** environ;

namespace gtrain {
namespace {

std::string fmt_num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

// Where a value came from: "file:line:col", or the override that set it.
struct Origins {
  std::string file;                               // shown for values read from the file
  std::map<std::string, std::string> overridden;  // "section.key" -> "--set ..." / "environment ..."

  std::string of(const std::string& dotted, const toml::source_region& src) const {
    auto it = overridden.find(dotted);
    if (it != overridden.end()) return it->second;
    if (src.begin.line == 0) return file;
    return file + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
  }
  // Where in the file, to report problems in file order: 0 for an override or no position.
  uint64_t position(const std::string& dotted, const toml::source_region& src) const {
    if (overridden.count(dotted)) return 0;
    return (static_cast<uint64_t>(src.begin.line) << 32) | src.begin.column;
  }
};

std::string describe_spec(const char* base, const cfg::Spec& s) {
  std::string out = base;
  if (s.min && s.max) {
    out += " in [" + fmt_num(*s.min) + ", " + fmt_num(*s.max) + "]";
  } else if (s.min) {
    out += (s.min_exclusive ? " > " : " >= ") + fmt_num(*s.min);
  } else if (s.max) {
    out += " <= " + fmt_num(*s.max);
  }
  if (!s.choices.empty()) {
    out = "one of";
    for (size_t i = 0; i < s.choices.size(); ++i) out += (i ? ", \"" : " \"") + s.choices[i] + "\"";
  }
  return out;
}

std::string render(const toml::node& n) {
  std::ostringstream os;
  n.visit([&](auto&& x) { os << x; });
  std::string type;
  switch (n.type()) {
    case toml::node_type::string:
      type = "string";
      break;
    case toml::node_type::integer:
      type = "integer";
      break;
    case toml::node_type::floating_point:
      type = "float";
      break;
    case toml::node_type::boolean:
      type = "boolean";
      break;
    case toml::node_type::array:
      type = "array";
      break;
    case toml::node_type::table:
      type = "table";
      break;
    default:
      type = "date/time";
      break;
  }
  std::string v = os.str();
  if (v.size() > 60) v = v.substr(0, 57) + "...";
  return v + " (" + type + ")";
}

bool in_range(double v, const cfg::Spec& s) {
  if (s.min && (s.min_exclusive ? !(v > *s.min) : !(v >= *s.min))) return false;
  if (s.max && !(v <= *s.max)) return false;
  return true;
}

// Every problem of one load, so a file's mistakes are reported in one pass, not one per run.
class Problems {
 public:
  // `position` orders the file's problems as they appear in it (Origins::position; 0 first).
  void add(std::string line, uint64_t position = 0) { lines_.emplace_back(position, std::move(line)); }
  bool empty() const { return lines_.empty(); }
  // One ConfigError: the first problem, then each other on its own line, at most kMaxLines lines.
  void throw_if_any() {
    if (lines_.empty()) return;
    std::stable_sort(lines_.begin(), lines_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    constexpr size_t kMaxLines = 20;
    const size_t shown = lines_.size() <= kMaxLines ? lines_.size() : kMaxLines - 1;
    std::string out;
    for (size_t i = 0; i < shown; ++i) out += (i ? "\n  " : "") + lines_[i].second;
    if (shown < lines_.size())
      out += "\n  ... and " + std::to_string(lines_.size() - shown) + " more (" + std::to_string(lines_.size()) +
             " problems in all)";
    throw ConfigError(out);
  }

 private:
  std::vector<std::pair<uint64_t, std::string>> lines_;
};

// Every section's keys, for "did you mean" across sections (lerning_rate in [train]).
using SectionKeys = std::vector<std::pair<std::string, std::vector<std::string>>>;

// Reads one section's fields from a TOML table through the struct's visit(); each problem goes to
// `problems` and the field keeps its default.
class SectionReader {
 public:
  SectionReader(const toml::table* tbl, std::string section, const Origins& origins, Problems& problems,
                const SectionKeys* all_keys = nullptr)
      : tbl_(tbl), section_(std::move(section)), origins_(origins), problems_(problems), all_keys_(all_keys) {}

  template <class T>
  void operator()(const char* key, T& out, const char* /*doc*/, const cfg::Spec& spec = {}) {
    known_.push_back(key);
    if (!tbl_) return;
    const toml::node* n = tbl_->get(key);
    if (!n) return;
    read(key, *n, out, spec);
  }

  // Any key the struct did not claim is unknown: each is reported, with a suggestion from this
  // section or, when a key of another section is closer, that one (section.key).
  void finish() const {
    if (!tbl_) return;
    for (auto&& [k, v] : *tbl_) {
      std::string name(k.str());
      if (std::find(known_.begin(), known_.end(), name) != known_.end()) continue;
      std::string msg =
          origins_.of(section_ + "." + name, k.source()) + ": unknown key '" + name + "' in [" + section_ + "]";
      const std::string near = suggestion(name);
      if (!near.empty())
        msg += "; did you mean " + near + "?";
      else
        msg += "; valid keys: " + join_known();
      problems_.add(msg, origins_.position(section_ + "." + name, k.source()));
    }
  }

 private:
  std::string suggestion(const std::string& name) const {
    const size_t limit = std::max<size_t>(2, name.size() / 3);
    std::string best;
    size_t best_d = limit + 1;
    for (const auto& k : known_) {
      const size_t d = cfg::edit_distance(name, k);
      if (d < best_d) best_d = d, best = "'" + k + "'";
    }
    if (!all_keys_) return best;
    // Another section's key only when it is closer, and close for its length (a short word is near
    // too many keys: lr is two edits from checkpoint.dir).
    best_d = std::min(best_d, name.size() / 4 + 1);
    for (const auto& [section, keys] : *all_keys_) {
      if (section == section_) continue;
      for (const auto& k : keys) {
        const size_t d = cfg::edit_distance(name, k);
        if (d < best_d) best_d = d, best = section + "." + k;
      }
    }
    return best;
  }

  std::string join_known() const {
    std::string s;
    for (auto& k : known_) s += (s.empty() ? "" : ", ") + k;
    return s;
  }

  void fail(const char* key, const toml::node& n, const std::string& expected) const {
    std::string dotted = section_ + "." + key;
    problems_.add(origins_.of(dotted, n.source()) + ": " + dotted + ": expected " + expected + ", got " + render(n),
                  origins_.position(dotted, n.source()));
  }

  // Keys in seconds (time_limit_s, min_lead_s, ...) also take a duration string ("2h", "1h30m", "01:30:00"),
  // read as gtrain run --time-limit reads it.
  static bool is_seconds_key(const std::string& key) {
    return key.size() > 2 && key.compare(key.size() - 2, 2, "_s") == 0;
  }
  // The seconds a duration string gives; nullopt once its problem is recorded.
  std::optional<double> parse_duration_or_fail(const char* key, const toml::node& n, const std::string& text,
                                               const std::string& expected) const {
    try {
      return parse_duration(text, section_ + "." + key);
    } catch (const ConfigError&) {
      fail(key, n, expected + " or a duration such as \"90s\", \"15m\", \"1h30m\", \"01:30:00\"");
      return std::nullopt;
    }
  }

  void read(const char* key, const toml::node& n, int64_t& out, const cfg::Spec& s) {
    auto v = n.as_integer();
    std::string expected = describe_spec("an integer", s);
    if (!v || !in_range(static_cast<double>(v->get()), s)) return fail(key, n, expected);
    out = v->get();
  }
  void read(const char* key, const toml::node& n, int& out, const cfg::Spec& s) {
    auto v = n.as_integer();
    if (!v || !in_range(static_cast<double>(v->get()), s)) return fail(key, n, describe_spec("an integer", s));
    if (v->get() < INT32_MIN || v->get() > INT32_MAX) return fail(key, n, "a 32-bit integer");
    out = static_cast<int>(v->get());
  }
  void read(const char* key, const toml::node& n, double& out, const cfg::Spec& s) {
    std::string expected = describe_spec("a number", s);
    double v;
    if (auto f = n.as_floating_point())
      v = f->get();
    else if (auto i = n.as_integer())
      v = static_cast<double>(i->get());
    else if (auto d = n.as_string(); d && is_seconds_key(key)) {
      const auto seconds = parse_duration_or_fail(key, n, d->get(), expected);
      if (!seconds) return;
      v = *seconds;
    } else
      return fail(key, n, expected);
    if (!std::isfinite(v) || !in_range(v, s)) return fail(key, n, expected);
    // Rates, decays and scales become 32-bit floats in tensors: past that range is a typo.
    if (std::abs(v) > 3.4e38) return fail(key, n, expected + ", within the 32-bit float range (|x| <= 3.4e38)");
    out = v;
  }
  void read(const char* key, const toml::node& n, bool& out, const cfg::Spec&) {
    auto b = n.as_boolean();
    if (!b) return fail(key, n, "true or false");
    out = b->get();
  }
  void read(const char* key, const toml::node& n, std::string& out, const cfg::Spec& s) {
    auto str = n.as_string();
    std::string expected = describe_spec("a string", s);
    if (!str) return fail(key, n, expected);
    if (!s.choices.empty() && std::find(s.choices.begin(), s.choices.end(), str->get()) == s.choices.end()) {
      std::string near = cfg::closest_match(str->get(), s.choices);
      return fail(key, n, expected + (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
    }
    out = str->get();
  }
  // An enum field: one of its table's names (enum_names.h), with a "did you mean" for a near miss.
  template <class E, std::enable_if_t<has_enum_names_v<E>, int> = 0>
  void read(const char* key, const toml::node& n, E& out, const cfg::Spec& s) {
    cfg::Spec named = s;
    named.choices = enum_name_list<E>();
    std::string name = name_of(out);
    read(key, n, name, named);  // a problem is recorded and `name` keeps the default
    if (const auto value = enum_from_name<E>(name)) out = *value;
  }
  void read(const char* key, const toml::node& n, std::vector<int64_t>& out, const cfg::Spec& s) {
    auto arr = n.as_array();
    std::string expected = describe_spec("an array of integers", s);
    if (!arr) return fail(key, n, expected);
    std::vector<int64_t> vals;
    for (auto& el : *arr) {
      auto i = el.as_integer();
      if (!i || !in_range(static_cast<double>(i->get()), s)) return fail(key, n, expected);
      vals.push_back(i->get());
    }
    out = vals;
  }
  // Arrays of tables ([[schedule.window]]): each table read by the element struct's visit().
  template <class T, class = std::enable_if_t<std::is_class_v<T>>>
  void read(const char* key, const toml::node& n, std::vector<T>& out, const cfg::Spec&) {
    auto arr = n.as_array();
    if (!arr) return fail(key, n, "an array of tables ([[" + section_ + "." + key + "]])");
    std::vector<T> vals;
    for (size_t i = 0; i < arr->size(); ++i) {
      const auto* tbl = (*arr)[i].as_table();
      if (!tbl) {
        fail(key, (*arr)[i], "a table");
        continue;
      }
      T item;
      SectionReader nested(tbl, section_ + "." + key, origins_, problems_);
      item.visit(nested);
      nested.finish();
      vals.push_back(item);
    }
    out = vals;
  }
  void read(const char* key, const toml::node& n, std::vector<std::string>& out, const cfg::Spec&) {
    auto arr = n.as_array();
    if (!arr) return fail(key, n, "an array of strings");
    std::vector<std::string> vals;
    for (auto& el : *arr) {
      auto str = el.as_string();
      if (!str) return fail(key, n, "an array of strings");
      vals.push_back(str->get());
    }
    out = vals;
  }

  const toml::table* tbl_;
  std::string section_;
  const Origins& origins_;
  Problems& problems_;
  const SectionKeys* all_keys_;
  std::vector<std::string> known_;
};

// Parses an override value as a TOML value; a bare word that is not TOML becomes a string.
void set_override(toml::table& root, const std::string& section, const std::string& key, const std::string& value) {
  toml::table* sec = root[section].as_table();
  if (!sec) {
    root.insert_or_assign(section, toml::table{});
    sec = root[section].as_table();
  }
  try {
    toml::table parsed = toml::parse("v = " + value);
    const toml::node* n = parsed.get("v");
    n->visit([&](auto&& x) { sec->insert_or_assign(key, x); });
  } catch (const toml::parse_error&) {
    sec->insert_or_assign(key, value);
  }
}

struct SectionCollector {
  std::vector<std::string> names;
  SectionKeys keys;
  template <class S>
  void operator()(const char* name, S& section, const char*) {
    names.push_back(name);
    std::vector<std::string> fields;
    for (const auto& f : cfg::list_fields(section)) fields.push_back(f.key);
    keys.emplace_back(name, fields);
  }
};

// The cross-field rules' problems (validate_job_config), each a line; the windows' own checks
// (which throw) only when there is no other problem.
void cross_field_problems(const JobConfig& c, Problems& problems);

// model.name = "hf", or gpt/llama with a Hugging Face directory in checkpoint.init_from: the [model]
// keys the job does not give come from its config.json, and a given one must agree with it.
void resolve_hf_model(JobConfig& c, const toml::table& root, const Origins& origins, Problems& problems) {
  const std::string& from = c.checkpoint.init_from;
  const bool hf_dir = is_hf_model_dir(from);
  const toml::table* model = root["model"].as_table();
  auto where_of = [&](const std::string& key) {
    const toml::node* n = model ? model->get(key) : nullptr;
    return origins.of("model." + key, n ? n->source() : toml::source_region{});
  };
  if (c.model.name == "hf" && !hf_dir) {
    problems.add(where_of("name") +
                 ": model.name = \"hf\" takes the model's shape from the config.json of "
                 "checkpoint.init_from, but checkpoint.init_from = \"" +
                 from +
                 "\" is not a Hugging Face model directory (a folder with config.json and the "
                 "model's .safetensors)");
    return;
  }
  if (!hf_dir || (c.model.name != "hf" && c.model.name != "gpt" && c.model.name != "llama")) return;
  std::set<std::string> given = c.model_keys_given;
  if (c.model.name == "hf") given.erase("name");
  try {
    for (auto& p : merge_hf_model_config(c.model, given, from, where_of)) problems.add(std::move(p));
  } catch (const ConfigError& e) {
    problems.add(std::string("checkpoint.init_from: ") + e.what() + (e.hint().empty() ? "" : "; hint: " + e.hint()));
  }
}

// GTRAIN_<SECTION>_<KEY> variables of `env` into `root`, each noted in `origins`; a near miss of a
// section name is a problem.
void apply_env_overrides(toml::table& root, const std::vector<std::string>& sections,
                         const std::map<std::string, std::string>& env, Origins& origins, Problems& problems) {
  for (const auto& [name, value] : env) {
    if (name.rfind("GTRAIN_", 0) != 0) continue;
    std::string rest = lower(name.substr(7));
    bool matched = false;
    for (const auto& s : sections) {
      if (rest.rfind(s + "_", 0) == 0 && rest.size() > s.size() + 1) {
        std::string key = rest.substr(s.size() + 1);
        set_override(root, s, key, value);
        origins.overridden[s + "." + key] = "environment " + name + "=" + value;
        matched = true;
      }
    }
    // GTRAIN_OPTIMISER_LR would otherwise change nothing, silently. gtrain's own variables
    // (GTRAIN_WORKER, GTRAIN_PROFILE_DIR, GTRAIN_INTERNAL_*, ...) are no near miss of a section.
    const std::string head = rest.substr(0, rest.find('_'));
    const std::string near = matched || head == rest ? std::string() : cfg::closest_match(head, sections);
    if (!near.empty() && head != "internal" && head != "profile" && head != "worker" && head != "slurm") {
      problems.add("environment " + name + ": no config section [" + head + "]; did you mean GTRAIN_" + upper(near) +
                   "_" + name.substr(8 + head.size()) + "?");
    }
  }
}

// --set section.key=value overrides into `root`, each noted in `origins`; a malformed one or an
// unknown section is a problem.
void apply_set_overrides(toml::table& root, const std::vector<std::string>& sections,
                         const std::vector<std::string>& sets, Origins& origins, Problems& problems) {
  for (const auto& set : sets) {
    auto eq = set.find('=');
    auto dot = set.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 || dot + 1 == eq) {
      problems.add("--set '" + set + "': expected section.key=value, e.g. --set train.steps=100");
      continue;
    }
    std::string section = set.substr(0, dot), key = set.substr(dot + 1, eq - dot - 1);
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      std::string near = cfg::closest_match(section, sections);
      problems.add("--set '" + set + "': unknown section [" + section + "]" +
                   (near.empty() ? "" : "; did you mean [" + near + "]?"));
      continue;
    }
    set_override(root, section, key, set.substr(eq + 1));
    origins.overridden[section + "." + key] = "--set " + set;
  }
}

}  // namespace

std::vector<std::string> section_names() {
  JobConfig c;
  SectionCollector col;
  c.visit_sections(col);
  return col.names;
}

JobConfig parse_job_config(const std::string& toml_text, const std::string& origin,
                           const std::vector<std::string>& sets, const std::map<std::string, std::string>& env) {
  Origins origins;
  origins.file = origin;
  toml::table root;
  try {
    root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& err) {
    throw ConfigError(origin + ":" + std::to_string(err.source().begin.line) + ":" +
                      std::to_string(err.source().begin.column) + ": invalid TOML: " + std::string(err.description()));
  }
  SectionCollector col;
  JobConfig().visit_sections(col);
  const std::vector<std::string>& sections = col.names;
  Problems problems;

  // Environment first, so that --set (applied after) wins.
  apply_env_overrides(root, sections, env, origins, problems);
  apply_set_overrides(root, sections, sets, origins, problems);

  // Unknown sections / top-level values.
  std::vector<std::string> sweep_sections;
  for (auto&& [k, v] : root) {
    std::string name(k.str());
    if (std::find(kSweepSections.begin(), kSweepSections.end(), name) != kSweepSections.end() && v.is_table()) {
      sweep_sections.push_back(name);
      continue;
    }
    if (std::find(sections.begin(), sections.end(), name) != sections.end()) {
      if (!v.is_table())
        problems.add(origins.of(name, k.source()) + ": '" + name + "' must be a [" + name + "] table, got " + render(v),
                     origins.position(name, k.source()));
      continue;
    }
    std::string where = origins.of(name, k.source());
    std::string near = cfg::closest_match(name, sections);
    if (v.is_table()) {
      problems.add(where + ": unknown section [" + name + "]" + (near.empty() ? "" : "; did you mean [" + near + "]?"),
                   origins.position(name, k.source()));
      continue;
    }
    // A key of some section, written above every section header: name the section.
    std::string owner;
    for (const auto& [section, keys] : col.keys) {
      if (owner.empty() && std::find(keys.begin(), keys.end(), name) != keys.end()) owner = section;
    }
    problems.add(where + ": unknown top-level key '" + name + "'; keys belong in a section such as [train]" +
                     (owner.empty() ? "" : "; did you mean " + owner + "." + name + " (under [" + owner + "])?"),
                 origins.position(name, k.source()));
  }

  JobConfig cfg;
  cfg.source_path = origin;
  cfg.overrides = origins.overridden;
  cfg.sweep_sections = sweep_sections;
  auto read_section = [&](const char* name, auto& section, const char*) {
    if constexpr (std::is_same_v<std::decay_t<decltype(section)>, ModelConfig>) {
      // model.preset first, so that the keys the file (or --set) gives override it.
      const toml::table* t = root[name].as_table();
      const toml::node* preset = t ? t->get("preset") : nullptr;
      if (preset && preset->is_string()) {
        try {
          section = apply_model_preset(section, preset->as_string()->get());
        } catch (const ConfigError& e) {
          problems.add(origins.of("model.preset", preset->source()) + ": " + e.what(),
                       origins.position("model.preset", preset->source()));
        }
      }
    }
    SectionReader reader(root[name].as_table(), name, origins, problems, &col.keys);
    section.visit(reader);
    reader.finish();
  };
  cfg.visit_sections(read_section);
  if (const toml::table* model = root["model"].as_table())
    for (auto&& [k, v] : *model) cfg.model_keys_given.insert(std::string(k.str()));
  if (problems.empty()) resolve_hf_model(cfg, root, origins, problems);
  // The cross-field rules only over values that were read: a field that failed keeps its default.
  if (problems.empty()) cross_field_problems(cfg, problems);
  problems.throw_if_any();
  return cfg;
}

JobConfig load_job_config(const std::string& path, const std::vector<std::string>& sets,
                          const std::map<std::string, std::string>& env) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path + ": is a directory, expected a TOML config file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open config file (does it exist and is it readable?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_job_config(ss.str(), path, sets, env);
}

void validate_job_config(const JobConfig& c) {
  Problems problems;
  cross_field_problems(c, problems);
  problems.throw_if_any();
}

namespace {

// [adapter]: the targets must name projections the model family has; rank must fit its width.
void adapter_problems(const JobConfig& c, const std::string& where, Problems& problems) {
  const AdapterConfig& a = c.adapter;
  if (!a.lora()) return;
  const std::string& m = c.model.name;
  if (m != "gpt" && m != "llama" && m != "hf") {
    problems.add(where + ": [adapter]: adapter.kind = \"lora\" needs a gpt or llama model, not model.name = \"" + m +
                 "\"");
    return;
  }
  if (a.targets.empty()) {
    problems.add(where + ": [adapter]: adapter.targets is empty; name the projections to adapt (e.g. [\"q\", \"v\"])");
  }
  for (const auto& t : a.targets) {
    if (t == "all" && a.targets.size() == 1) continue;
    if (!lora_target_known(m, t)) {
      problems.add(where + ": [adapter]: adapter.targets: '" + t + "' is not a projection of " +
                   (m == "hf" ? std::string("this model") : "a " + m + " model") + "; expected " + lora_target_list(m) +
                   (a.targets.size() > 1 ? "" : " or \"all\""));
    }
  }
  if (m != "hf" && a.rank > c.model.n_embd) {
    problems.add(where + ": [adapter]: adapter.rank = " + std::to_string(a.rank) +
                 " is above the model width model.n_embd = " + std::to_string(c.model.n_embd) +
                 "; a low-rank adapter needs rank <= the projection's smaller side");
  }
}

// [distill]: a token model to distill into, and a layout the teacher runs in. `from(keys)`: where
// the keys came from (cross_field_problems).
template <class From>
void distill_problems(const JobConfig& c, const From& from, Problems& problems) {
  const std::string where = from({"distill.teacher", "distill.cache", "model.name"});
  if (c.distill.enabled() && c.model.name != "gpt" && c.model.name != "llama" && c.model.name != "hf") {
    problems.add(where + ": [distill]: distillation needs a token model (model.name = \"gpt\", \"llama\" or " +
                 "\"hf\"), not \"" + c.model.name + "\"");
  }
}

// Exactly one of train.steps, train.epochs, train.tokens.
void length_problems(const TrainConfig& t, const std::string& where, Problems& problems) {
  if ((t.steps > 0) + (t.epochs > 0) + (t.tokens > 0) == 1) return;
  std::string found;
  if (t.steps > 0) found += " train.steps = " + std::to_string(t.steps);
  if (t.epochs > 0) found += " train.epochs = " + fmt_num(t.epochs);
  if (t.tokens > 0) found += " train.tokens = " + std::to_string(t.tokens);
  problems.add(where + ": [train]: set exactly one of train.steps, train.epochs, train.tokens" +
               (found.empty() ? std::string(" (none is set)") : " (found" + found + ")"));
}

void cross_field_problems(const JobConfig& c, Problems& problems) {
  // Where the keys a check is about came from: the --set or environment variable that set one of
  // them, else the file.
  const std::string file = c.source_path.empty() ? "config" : c.source_path;
  auto from = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      auto it = c.overrides.find(k);
      if (it != c.overrides.end()) return it->second;
    }
    return file;
  };
  const auto& t = c.train;
  length_problems(t, from({"train.steps", "train.epochs", "train.tokens"}), problems);
  if (!c.model.preset.empty() && c.model.name != "llama") {
    problems.add(from({"model.name", "model.preset"}) + ": [model]: model.preset = \"" + c.model.preset +
                 "\" is a llama-family shape, but model.name = \"" + c.model.name +
                 "\"; leave model.name out or set it to \"llama\"");
  }
  if (c.model.name == "llama") {
    const auto& m = c.model;
    if (m.head_dim == 0 && m.n_embd % m.n_head != 0) {
      problems.add(from({"model.n_head", "model.n_embd", "model.head_dim"}) +
                   ": [model]: model.n_head = " + std::to_string(m.n_head) +
                   " must divide model.n_embd = " + std::to_string(m.n_embd) + " unless model.head_dim is set");
    }
    if (m.n_head % m.llama_kv_heads() != 0) {
      problems.add(from({"model.n_kv_head", "model.n_head"}) + ": [model]: model.n_kv_head = " +
                   std::to_string(m.n_kv_head) + " must divide model.n_head = " + std::to_string(m.n_head));
    }
    if (m.llama_head_dim() % 2 != 0) {
      problems.add(from({"model.head_dim", "model.n_embd", "model.n_head"}) +
                   ": [model]: the head width must be even for rotary embeddings (it is " +
                   std::to_string(m.llama_head_dim()) + ")");
    }
    if (m.rope_scaling == "llama3" && m.rope_high_freq_factor <= m.rope_low_freq_factor) {
      problems.add(from({"model.rope_high_freq_factor", "model.rope_low_freq_factor"}) +
                   ": [model]: model.rope_high_freq_factor must be above model.rope_low_freq_factor");
    }
  }
  if (c.data.kind == DataKind::tokens && c.data.token_dtype == "uint16" && c.model.vocab > 65536) {
    problems.add(from({"data.token_dtype", "model.vocab", "model.preset"}) +
                 ": [data]: data.token_dtype = \"uint16\" " + "holds ids up to 65535, but model.vocab = " +
                 std::to_string(c.model.vocab) + "; write the tokens as uint32 and set data.token_dtype = \"uint32\"");
  }
  if (is_text(c.data.kind) && !c.data.eval_path.empty()) {
    problems.add(from({"data.eval_path", "data.kind"}) + ": [data]: data.eval_path is not read with data.kind = \"" +
                 std::string(name_of(c.data.kind)) +
                 "\"; data.eval_fraction holds documents out instead (or prepare held-out text with gtrain prepare)");
  }
  if (c.data.format != DataFormat::text && c.data.kind != DataKind::jsonl) {
    problems.add(from({"data.format", "data.kind"}) + ": [data]: data.format = \"" +
                 std::string(name_of(c.data.format)) + "\" reads JSONL conversations, but data.kind = \"" +
                 std::string(name_of(c.data.kind)) + "\"; set data.kind = \"jsonl\"");
  }
  adapter_problems(c, from({"adapter.kind", "adapter.targets", "adapter.rank"}), problems);
  distill_problems(c, from, problems);
  if (c.model.name == "gpt" && c.model.n_embd % c.model.n_head != 0) {
    problems.add(from({"model.n_head", "model.n_embd", "model.name"}) + ": [model]: model.n_head = " +
                 std::to_string(c.model.n_head) + " must divide model.n_embd = " + std::to_string(c.model.n_embd));
  }
  if (t.tokens > 0 && c.model.name != "gpt" && c.model.name != "llama" && !is_token_file(c.data.kind)) {
    problems.add(from({"train.tokens", "model.name", "data.kind"}) +
                 ": [train]: train.tokens needs a token model and data (data.kind = "
                 "\"tokens\" or \"text_bytes\"); use train.steps or train.epochs");
  }
  for (const auto& sig : c.schedule.stop_signals) {
    if (signal_number(sig) < 0) {
      problems.add(from({"schedule.stop_signals"}) + ": schedule.stop_signals: unknown signal '" + sig +
                   "' (expected USR1, USR2, TERM, INT, HUP)");
    }
  }
  const std::string& name = c.log.name;
  if (name == "." || name == ".." || name.find('/') != std::string::npos) {
    // <root>/.. would put the run's files (checkpoints, metrics, locks) into log.root's parent.
    problems.add(from({"log.name"}) + ": log.name: expected a plain name without '/' (not . or ..), got '" + name +
                 "'; the run directory is <log.root>/<log.name>: set log.root to choose where, or pass "
                 "--run-dir");
  }
  if (c.parallel.pp_microbatches > 0 && c.parallel.micro_batch > 0) {
    problems.add(from({"parallel.pp_microbatches", "parallel.micro_batch"}) +
                 ": [parallel]: set parallel.micro_batch or parallel.pp_microbatches, not both (micro-batches "
                 "per replica decide the micro-batch size, and the other way round)");
  }
  if (c.parallel.mode == ParallelMode::automatic) {
    const ParallelConfig d;
    if (c.parallel.tp != d.tp || c.parallel.pp != d.pp || c.parallel.dp != d.dp || c.parallel.zero != d.zero ||
        c.parallel.recompute != d.recompute || c.parallel.offload != d.offload) {
      problems.add(from({"parallel.mode", "parallel.dp", "parallel.tp", "parallel.pp", "parallel.zero",
                         "parallel.recompute", "parallel.offload"}) +
                   ": [parallel]: dp, tp, pp, zero, offload and recompute are chosen by the planner "
                   "when parallel.mode = \"auto\"; set parallel.mode = \"explicit\" to fix them");
    }
  }
  // Last, and only alone: parse_window throws its problem (its one line) itself.
  if (!problems.empty()) return;
  for (size_t i = 0; i < c.schedule.window.size(); ++i) {
    parse_window(c.schedule.window[i], from({"schedule.window"}) + ": schedule.window[" + std::to_string(i) + "]");
  }
}

}  // namespace

std::string to_toml(const JobConfig& c) {
  std::string out = "# Resolved gtrain configuration (file + environment + --set, with defaults).\n";
  auto write = [&](const char* name, auto& section, const char*) {
    out += "\n[" + std::string(name) + "]\n";
    for (const auto& f : cfg::list_fields(section)) out += f.key + " = " + f.value + "\n";
  };
  const_cast<JobConfig&>(c).visit_sections(write);
  return out;
}

std::map<std::string, std::string> flat_fields(const JobConfig& c) {
  std::map<std::string, std::string> out;
  auto add = [&](const char* name, auto& section, const char*) {
    for (const auto& f : cfg::list_fields(section)) out[std::string(name) + "." + f.key] = f.value;
  };
  const_cast<JobConfig&>(c).visit_sections(add);
  return out;
}

std::string reference_toml() {
  std::string out =
      "# gtrain configuration reference: every section and key with its default and meaning.\n"
      "# Generated from the config structs (`gtrain config reference`); a test checks they agree.\n"
      "# Precedence: --set section.key=value, then GTRAIN_<SECTION>_<KEY> environment variables,\n"
      "# then this file, then these defaults.\n";
  JobConfig c;
  auto write = [&](const char* name, auto& section, const char* doc) {
    out += "\n# " + std::string(doc) + "\n[" + name + "]\n";
    for (const auto& f : cfg::list_fields(section)) {
      out += "# " + f.doc + "\n" + f.key + " = " + f.value + "\n";
    }
  };
  c.visit_sections(write);
  return out;
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace gtrain
