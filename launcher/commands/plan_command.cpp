// plan_command.cpp: `gtrain plan`: describe the job, pick the hardware profile and topology, run the
// planner for the granted (or given) GPU count and for a range of counts, and print it all.
#include "launcher/commands/plan_command.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "launcher/chain/window_calendar.h"
#include "launcher/commands/plan_layouts.h"
#include "launcher/commands/plan_lora.h"
#include "launcher/launch/run_launch.h"
#include "launcher/scheduler/allocation.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/schedule.h"
#include "runtime/core/train_steps.h"
#include "strategies/planner/planner.h"

namespace gtrain {
namespace {

using nlohmann::json;
std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
}
std::string rpad(const std::string& s, size_t w) {
  return s.size() >= w ? " " + s : std::string(w - s.size(), ' ') + s;
}

// How the command plans: world, topology, profile, memory.
struct Setup {
  int64_t world = 1;
  int64_t gpus_per_node = 1;
  bool gpu = false;  // planning GPU ranks (else CPU ranks)
  HardwareProfile profile;
  double memory_per_rank = 0;         // PlannerInput::memory_bytes (0 = the profile's)
  std::vector<int64_t> what_if;       // GPU counts for the table
  int64_t what_if_gpus_per_node = 0;  // per node in the table's rows (0 = gpus_per_node)
  std::vector<std::string> notes;
  std::string source;  // "granted: slurm job 123" or "--gpus 8"
  // CPU ranks: each node's slots, which gtrain run's mpirun fills in turn (all on one node here).
  std::vector<int64_t> cpu_slots;
  double host_memory = 0;    // CPU ranks: the memory the ranks of a node share
  bool count_list = false;   // --gpus gave several counts: the chosen block is for the largest
  bool exact_ranks = false;  // --ranks N: exactly N ranks, as gtrain run --ranks N (a grant may be used in part)
};

// CPU ranks: the most ranks on one node when gtrain run starts `world` of them (mpirun fills each
// node's slots in turn; past them all, it spreads them over every node).
int64_t cpu_ranks_per_node(const Setup& s, int64_t world) {
  int64_t nodes = 0, filled = 0;
  for (int64_t slots : s.cpu_slots) {
    if (filled >= world) break;
    filled += slots;
    ++nodes;
  }
  nodes = std::max<int64_t>(1, nodes);
  return (world + nodes - 1) / nodes;
}

std::vector<int64_t> ladder(int64_t world) {
  std::set<int64_t> s;
  const int64_t top = std::min<int64_t>(4096, std::max<int64_t>(8, 4 * world));
  for (int64_t n = 1; n <= top; n *= 2) s.insert(n);
  s.insert(world);
  return {s.begin(), s.end()};
}

Setup resolve_setup(const PlanOptions& o, const std::map<std::string, std::string>& env, const HardwareInfo& hw,
                    const JobConfig& cfg) {
  Setup s;
  const bool hypothetical = !o.gpus.empty();
  std::vector<int64_t> counts;
  double mem_flag = 0;
  if (!o.gpu_mem.empty()) mem_flag = parse_memory_size(o.gpu_mem, "--gpu-mem");
  Allocation alloc;
  if (hypothetical && o.ranks > 0) {
    throw ConfigError(str("--ranks ", o.ranks, " plans the ranks gtrain run --ranks ", o.ranks, " starts here, --gpus ",
                          o.gpus, " GPUs elsewhere"),
                      "give one of them");
  }
  if (hypothetical) {
    counts = parse_gpu_counts(o.gpus, "--gpus");
    s.world = *std::max_element(counts.begin(), counts.end());
    s.gpu = true;
    s.source = "--gpus " + o.gpus;
  } else {
    DiscoveryOptions d;
    d.read_limits = false;
    d.hardware = hw;
    d.ranks = o.ranks;  // as gtrain run --ranks N
    s.exact_ranks = o.ranks > 0;
    alloc = discover_allocation(env, system_command_runner(2.0), d);
    s.world = alloc.world_size();
    s.gpu = (alloc.total_gpus() > 0 && alloc.cuda_build) || !o.gpu_type.empty() || mem_flag > 0;
    s.source = "granted: " + std::string(scheduler_name(alloc.scheduler)) +
               (alloc.job_id.empty() ? "" : " job " + alloc.job_id) + ", " + alloc.world_size_reason();
  }
  if (o.nodes < 0) throw ConfigError("--nodes " + std::to_string(o.nodes) + ": expected a node count >= 1");
  if (o.nodes > 0) {
    if (s.world % o.nodes != 0) {
      throw ConfigError("--nodes " + std::to_string(o.nodes) + " must divide the GPU count " + std::to_string(s.world));
    }
    s.gpus_per_node = s.world / o.nodes;
  } else if (hypothetical) {
    s.gpus_per_node = std::min<int64_t>(s.world, 8);
    s.what_if_gpus_per_node = 8;  // the table's other counts fill nodes of 8, as --nodes says by default
  } else if (alloc.gpus_per_node() > 0 && alloc.ranks_override == 0) {
    s.gpus_per_node = alloc.gpus_per_node();
  } else {
    const int64_t n = std::max<size_t>(1, alloc.nodes.size());
    s.gpus_per_node = (s.world + n - 1) / n;
  }

  // The hardware profile.
  const auto saved = load_profile(profile_path(env, hw.hostname));
  if (!o.gpu_type.empty()) {
    auto p = find_gpu_profile(o.gpu_type, mem_flag);
    if (!p) {
      std::vector<std::string> names;
      for (const auto& t : gpu_profile_table()) names.push_back(t.name);
      throw ConfigError("--gpu-type '" + o.gpu_type + "': unknown GPU; known: " + join(names));
    }
    s.profile = *p;
  } else if (s.gpu) {
    const std::string model = hypothetical ? std::string() : alloc.gpu_model;
    const double mem = hypothetical ? mem_flag : static_cast<double>(alloc.gpu_memory_bytes);
    if (saved && saved->kind == DeviceKind::gpu && (model.empty() || saved->name == model) && !hypothetical) {
      s.profile = *saved;
    } else if (auto p = find_gpu_profile(model, mem)) {
      s.profile = *p;
    } else if (mem_flag > 0) {
      s.profile = nearest_gpu_profile_by_memory(mem_flag);
      s.notes.push_back("GPU type not given: assuming " + s.profile.name + " rates for " + format_gib(mem_flag) +
                        " GiB (use --gpu-type)");
    } else {
      s.profile = *find_gpu_profile("A100-80GB");
      s.notes.push_back(std::string("GPU type ") + (model.empty() ? "not given" : "'" + model + "' not in the table") +
                        ": assuming A100-80GB (use --gpu-type)");
    }
  } else {
    s.profile = saved && saved->kind == DeviceKind::cpu ? *saved : default_cpu_profile(hw.cores);
    if (!alloc.cuda_build && alloc.total_gpus() > 0) {
      s.notes.push_back("this build has no CUDA: the " + std::to_string(alloc.total_gpus()) +
                        " granted GPUs run as CPU ranks; plan for GPUs with --gpus N --gpu-type NAME");
    }
  }
  if (mem_flag > 0) s.profile.memory_bytes = mem_flag;
  if (!s.gpu) {
    // CPU ranks share their node's memory, and go where gtrain run's mpirun puts them: the node slots
    // of run_launch.cpp (a GPU's, else a task's, else one), or those --nodes gives.
    for (const auto& n : alloc.nodes)
      s.cpu_slots.push_back(n.gpus.empty() ? std::max(1, n.tasks) : static_cast<int>(n.gpus.size()));
    if (o.nodes > 0) s.cpu_slots.assign(static_cast<size_t>(o.nodes), s.world / o.nodes);
    s.gpus_per_node = cpu_ranks_per_node(s, s.world);
    s.host_memory = static_cast<double>(hw.memory_bytes);
    s.memory_per_rank = 0.8 * s.host_memory / static_cast<double>(s.gpus_per_node);
  }
  if (cfg.parallel.memory_gb > 0) s.memory_per_rank = cfg.parallel.memory_gb * kGiB;
  s.what_if = counts.size() > 1 ? counts : ladder(s.world);
  s.count_list = counts.size() > 1;
  return s;
}

PlannerInput planner_input(const JobConfig& cfg, const JobDescription& d, const Setup& s, int64_t world,
                           bool runnable) {
  PlannerInput in = planner_input_for(cfg, d.stats, world);
  in.gpus_per_node = std::min(world, s.gpus_per_node);
  in.memory_bytes = s.memory_per_rank;
  if (!s.gpu) {
    in.gpus_per_node = cpu_ranks_per_node(s, world);
    if (cfg.parallel.memory_gb <= 0) in.memory_bytes = 0.8 * s.host_memory / static_cast<double>(in.gpus_per_node);
  }
  in.profile = s.profile;
  in.caps = runnable ? kRunCapabilities : kAllCapabilities;
  in.use_fewer_ranks = !s.exact_ranks;
  return in;
}

std::string caps_text(const Capabilities& c) {
  std::string s = "dp";
  if (c.tensor_parallel) s += ", tp";
  if (c.pipeline_parallel) s += ", pp";
  if (c.max_zero > 0) s += " with ZeRO 0-" + std::to_string(c.max_zero);
  if (c.recompute) s += ", recompute";
  if (c.offload) s += ", optimizer offload";
  return s;
}

struct WhatIfRow {
  int64_t gpus = 0, nodes = 0;
  bool feasible = false;
  RankedPlan best;
  std::string why;
};

std::string cpu_or_gpu(const Setup& s) {
  return s.gpu ? "GPU" : "rank";
}

}  // namespace

double parse_memory_size(const std::string& text, const std::string& what) {
  const std::string t = text;
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  const std::string number = t.substr(0, i);
  std::string unit = t.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  auto fail = [&]() -> double {
    throw ConfigError(what + " '" + text + "': expected a memory size such as 80GiB, 40GB or 81920MiB");
  };
  if (number.empty() || number == "." || std::count(number.begin(), number.end(), '.') > 1) return fail();
  const double v = std::stod(number);
  double mult = 0;
  if (unit.empty() || unit == "gib" || unit == "g" || unit == "gi")
    mult = kGiB;
  else if (unit == "gb")
    mult = 1e9;
  else if (unit == "mib" || unit == "m" || unit == "mi")
    mult = kMiB;
  else if (unit == "mb")
    mult = 1e6;
  else if (unit == "tib" || unit == "t" || unit == "ti")
    mult = kGiB * 1024.0;
  else if (unit == "tb")
    mult = 1e12;
  else
    return fail();
  const double bytes = v * mult;
  if (!(bytes >= 64.0 * 1024 * 1024)) {
    throw ConfigError(what + " '" + text + "': too small; expected at least 64MiB per GPU");
  }
  return bytes;
}

std::vector<int64_t> parse_gpu_counts(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  auto fail = [&] {
    throw ConfigError(what + " '" + text +
                      "': expected a GPU count from 1 to 65536 (e.g. 8), a list such as 1,2,4,8 or a range "
                      "such as 1-8");
  };
  auto count = [&](const std::string& item) {
    if (item.empty() || item.size() > 6 || !std::all_of(item.begin(), item.end(), ::isdigit)) fail();
    const int64_t n = std::stoll(item);
    if (n < 1 || n > 65536) fail();
    return n;
  };
  auto add = [&](int64_t n) {
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw ConfigError(what + " '" + text + "': " + std::to_string(n) + " is listed twice");
    out.push_back(n);
  };
  std::string item;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ',') {
      const size_t dash = item.find('-');
      if (dash == std::string::npos) {
        add(count(item));
      } else {  // a range a-b, both ends included
        const int64_t a = count(item.substr(0, dash)), b = count(item.substr(dash + 1));
        if (b < a || b - a >= 4096) fail();
        for (int64_t n = a; n <= b; ++n) add(n);
      }
      item.clear();
    } else if (text[i] != ' ') {
      item += text[i];
    }
  }
  return out;
}

std::optional<JobDescription> describe_job_from_config(const JobConfig& cfg) {
  const auto stats = model_stats_from_config(cfg);
  if (!stats) return std::nullopt;  // the model must be built, or the data says its vocabulary
  JobDescription d;
  d.stats = *stats;  // sized from the shape: a 13B model is never built here
  const auto steps = total_steps_without_data(cfg.train, d.stats.seq_len);
  if (!steps) return std::nullopt;  // the data's size decides
  d.total_steps = *steps;
  return d;
}

namespace {
JobSizer& job_sizer() {
  static JobSizer sizer;
  return sizer;
}
}  // namespace

void set_job_sizer(JobSizer sizer) {
  job_sizer() = std::move(sizer);
}

JobDescription describe_job(const JobConfig& cfg) {
  if (auto d = describe_job_from_config(cfg)) return *d;
  if (!job_sizer())
    throw std::logic_error("describe_job: model '" + cfg.model.name +
                           "' must be built to be sized, and no JobSizer is set");
  return job_sizer()(cfg);
}

namespace {

// What `gtrain plan` computed, rendered once as text or as JSON.
struct PlanReport {
  JobConfig cfg;
  JobDescription job;
  Setup setup;
  PlannerInput input;
  std::vector<RankedPlan> candidates;
  bool ok = false;    // the first candidate fits
  double usable = 0;  // usable memory per rank
  std::string unit;   // "GPU" or "rank"
  std::vector<WhatIfRow> rows;
  std::string error;                   // why nothing fits ("" when ok)
  std::string error_hint;              // what to do about it ("" when none)
  std::optional<LoraSuggestion> lora;  // no full fine-tune fits memory: the same job with LoRA
};

// Whether a layout would fit but for memory (not only shapes or the batch split ruling them out).
bool memory_bound(const std::vector<RankedPlan>& all) {
  for (const auto& r : all) {
    if (!r.structural && (r.tight || r.missing_bytes > 0)) return true;
  }
  return false;
}

// The closest miss of a device count where nothing fits: the least memory short, else why dp
// cannot split the batch.
std::string closest_miss(const std::vector<RankedPlan>& all, const Setup& s) {
  for (const auto& r : all) {
    if (r.tight) return r.why + " (" + short_layout(r.plan) + ")";
  }
  for (const auto& r : all) {
    if (!r.structural && r.missing_bytes > 0) {
      return "needs " + format_bytes(r.memory.total()) + " per " + cpu_or_gpu(s) + " at best (" + short_layout(r.plan) +
             "), " + format_bytes(r.missing_bytes) + " missing";
    }
  }
  std::string why;
  for (const auto& r : all) {
    if (r.plan.tp == 1 && r.plan.pp == 1) why = r.why;
  }
  return why;
}

// What-if over device counts, always in auto mode.
std::vector<WhatIfRow> what_if_rows(const PlanOptions& o, const JobConfig& cfg, const JobDescription& d,
                                    const Setup& s) {
  std::vector<WhatIfRow> rows;
  JobConfig auto_cfg = cfg;
  auto_cfg.parallel.mode = ParallelMode::automatic;
  auto_cfg.parallel.dp = 0, auto_cfg.parallel.tp = 1, auto_cfg.parallel.pp = 1, auto_cfg.parallel.zero = 0;
  auto_cfg.parallel.recompute = false;
  for (int64_t n : s.what_if) {
    WhatIfRow row;
    row.gpus = n;
    Setup row_setup = s;
    if (s.what_if_gpus_per_node > 0) row_setup.gpus_per_node = s.what_if_gpus_per_node;
    PlannerInput wi = planner_input(auto_cfg, d, row_setup, n, o.runnable);
    row.nodes = (n + wi.gpus_per_node - 1) / wi.gpus_per_node;
    const auto all = plan_candidates(wi);
    if (!all.empty() && all.front().feasible) {
      row.feasible = true;
      row.best = all.front();
    } else {
      row.why = closest_miss(all, s);
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

std::optional<Plan> plan_config(const PlanOptions& o, const std::map<std::string, std::string>& env) {
  const JobConfig cfg = load_job_config(o.config_path, o.sets, env);
  const Setup s = resolve_setup(o, env, query_hardware(), cfg);
  const auto all = plan_candidates(planner_input(cfg, describe_job(cfg), s, s.world, o.runnable));
  if (all.empty() || !all.front().feasible) return std::nullopt;
  return all.front().plan;
}

namespace {

PlanReport compute_plan_report(const PlanOptions& o, const std::map<std::string, std::string>& env,
                               const HardwareInfo& hw) {
  PlanReport r;
  r.cfg = load_job_config(o.config_path, o.sets, env);
  r.job = describe_job(r.cfg);
  r.setup = resolve_setup(o, env, hw, r.cfg);
  r.input = planner_input(r.cfg, r.job, r.setup, r.setup.world, o.runnable);
  r.candidates = plan_candidates(r.input);  // explicit layouts with wrong factors throw here
  r.ok = !r.candidates.empty() && r.candidates.front().feasible;
  r.unit = cpu_or_gpu(r.setup);
  r.usable = usable_memory_bytes(r.input);
  r.rows = what_if_rows(o, r.cfg, r.job, r.setup);
  if (!r.ok && lora_suggestion_applies(r.cfg) && memory_bound(r.candidates)) {
    r.lora = plan_lora_suggestion(r.cfg, suggested_lora(r.setup.gpu), [&](const JobConfig& c) {
      return planner_input(c, r.job, r.setup, r.setup.world, o.runnable);
    });
  }
  if (!r.ok) {
    try {
      plan_job(r.input);
    } catch (const ConfigError& e) {
      r.error = e.what();
      r.error_hint = e.hint();
    }
  }
  return r;
}

json what_if_json(const WhatIfRow& r, int64_t total_steps) {
  json x = {{"gpus", r.gpus}, {"nodes", r.nodes}, {"feasible", r.feasible}};
  if (!r.feasible) {
    x["why"] = r.why;
    return x;
  }
  const double step = r.best.time.total();
  const double steps = static_cast<double>(total_steps);
  x["plan"] = candidate_json(r.best);
  x["step_seconds"] = step;
  x["memory_bytes"] = r.best.memory.total();
  x["finish_seconds"] = total_steps > 0 ? json(step * steps) : json(nullptr);
  x["gpu_hours"] = total_steps > 0 ? json(step * steps * static_cast<double>(r.gpus) / 3600.0) : json(nullptr);
  return x;
}

void fill_plan_json(const PlanOptions& o, const PlanReport& r, json& doc) {
  const auto& m = r.job.stats;
  const auto& in = r.input;
  doc["config"] = o.config_path;
  doc["model"] = {{"name", r.cfg.model.name},
                  {"params", m.params},
                  {"blocks", m.blocks},
                  {"heads", m.heads},
                  {"kv_heads", m.kv_heads > 0 ? m.kv_heads : m.heads},
                  {"hidden", m.hidden},
                  {"seq_len", m.seq_len},
                  {"vocab", m.vocab},
                  {"flops_per_sample", m.flops_per_sample}};
  doc["global_batch"] = r.cfg.train.global_batch;
  doc["steps"] = r.job.total_steps > 0 ? json(r.job.total_steps) : json(nullptr);
  doc["precision"] = r.cfg.precision.dtype;
  doc["world"] = r.setup.world;
  doc["unit"] = r.unit;
  doc["gpus_per_node"] = in.gpus_per_node;
  doc["nodes"] = (r.setup.world + in.gpus_per_node - 1) / in.gpus_per_node;
  doc["source"] = r.setup.source;
  doc["usable_memory_bytes"] = std::isinf(r.usable) ? json(nullptr) : json(r.usable);
  doc["memory_margin"] = in.parallel.memory_margin;
  doc["hardware"] = profile_to_json(r.setup.profile);
  doc["capabilities"] = {{"max_zero", in.caps.max_zero},
                         {"tensor_parallel", in.caps.tensor_parallel},
                         {"pipeline_parallel", in.caps.pipeline_parallel},
                         {"recompute", in.caps.recompute},
                         {"offload", in.caps.offload}};
  doc["chosen"] = r.ok ? candidate_json(r.candidates.front()) : json(nullptr);
  json cj = json::array();
  for (const auto& c : r.candidates) cj.push_back(candidate_json(c));
  doc["candidates"] = cj;
  json wj = json::array();
  for (const auto& row : r.rows) wj.push_back(what_if_json(row, r.job.total_steps));
  doc["what_if"] = wj;
  doc["notes"] = r.setup.notes;
  doc["error"] = r.error.empty() ? json(nullptr) : json(r.error);
  doc["lora_suggestion"] = r.lora ? lora_suggestion_json(*r.lora) : json(nullptr);
}

void render_header(const PlanOptions& o, const PlanReport& r, std::ostream& out) {
  const auto& m = r.job.stats;
  const auto& cfg = r.cfg;
  const Setup& s = r.setup;
  out << "gtrain plan: " << o.config_path << "\n";
  out << "  model     " << cfg.model.name << ": " << strf("%.1f", static_cast<double>(m.params) / 1e6) << "M params";
  if (m.blocks > 0) out << ", " << m.blocks << " blocks";
  if (m.heads > 0) out << ", " << m.heads << " heads";
  if (m.kv_heads > 0 && m.kv_heads != m.heads) out << " over " << m.kv_heads << " key/value heads";
  if (m.intermediate > 0) out << ", MLP " << m.intermediate << (m.gated_mlp ? " (SwiGLU)" : "");
  if (m.vocab > 0) out << ", vocabulary " << m.vocab;
  out << "; " << strf("%.3g", m.flops_per_sample) << " FLOPs per sample\n";
  out << "  training  global_batch " << cfg.train.global_batch << ", "
      << (r.job.total_steps > 0 ? std::to_string(r.job.total_steps) + " steps" : std::string("steps unknown")) << ", "
      << cfg.precision.dtype << ", " << cfg.optimizer.name << "\n";
  out << "  devices   " << s.world << " " << r.unit << (s.world == 1 ? "" : "s") << " (" << s.source << "), "
      << r.input.gpus_per_node << " per node\n";
  out << "  profile   " << s.profile.name << " (" << s.profile.source
      << "): " << strf("%.1f", s.profile.achievable_flops(cfg.precision.dtype) / 1e12) << " TFLOP/s achievable in "
      << cfg.precision.dtype << ", "
      << (std::isinf(r.usable) ? std::string("unlimited") : format_gib(r.usable) + " GiB") << " usable per " << r.unit
      << (r.input.memory_bytes <= 0 && s.profile.reserved_bytes > 0
              ? " (" + format_gib(s.profile.memory_bytes) + " GiB total less " + format_gib(s.profile.reserved_bytes) +
                    " GiB for the CUDA context and NCCL)"
              : std::string())
      << ", links " << strf("%.1f", s.profile.intra_node_bw / 1e9) << " GB/s in node / "
      << strf("%.1f", s.profile.inter_node_bw / 1e9) << " GB/s per node across\n";
  const std::string run_caps = caps_text(kRunCapabilities);
  out << "  executors " << caps_text(r.input.caps)
      << (caps_text(r.input.caps) == run_caps ? " (all executed by gtrain run)"
                                              : " (gtrain run executes " + run_caps + "; --runnable plans for that)")
      << "\n";
  const AdapterCost& a = r.input.adapter_cost;
  if (a.enabled()) {
    out << "  adapter   LoRA rank " << cfg.adapter.rank << " on " << join(cfg.adapter.targets) << ": "
        << strf("%.1f", static_cast<double>(a.params) / 1e6) << "M trained parameters, the base frozen in "
        << cfg.adapter.base_dtype << "\n";
  }
  if (r.input.teacher.enabled()) {
    out << "  teacher   " << cfg.distill.teacher << ": "
        << strf("%.1f", static_cast<double>(r.input.teacher.model.params) / 1e6) << "M params, frozen, forward only\n";
  }
  if (!r.input.teacher_note.empty()) out << "  note      " << r.input.teacher_note << " (left out of the plan)\n";
  for (const auto& n : s.notes) out << "  note      " << n << "\n";
  out << "\n";
}

void render_chosen(const PlanOptions& o, const PlanReport& r, std::ostream& out) {
  const Setup& s = r.setup;
  const std::string& unit = r.unit;
  if (!r.ok) {
    out << "chosen: none fits on " << s.world << " " << unit << (s.world == 1 ? "" : "s") << "\n  " << r.error << "\n";
    return;
  }
  const RankedPlan& c = r.candidates.front();
  const MemoryEstimate& me = c.memory;
  const TimeEstimate& te = c.time;
  out << "chosen";
  if (s.count_list) {
    out << " for " << s.world << " " << unit << "s (the largest of --gpus " << o.gpus
        << "; the table below plans each count)";
  }
  out << ": " << c.plan.summary() << "\n";
  if (c.plan.requested_global_batch > 0) {
    out << "  global batch " << c.plan.global_batch() << " (requested " << c.plan.requested_global_batch
        << ", within parallel.batch_tolerance)\n";
  }
  out << "  memory per " << unit << "  " << format_bytes(me.total()) << " of " << format_bytes(r.usable) << " usable"
      << (std::isinf(r.usable) ? std::string()
                               : " (" + strf("%.0f", 100.0 * me.total() / r.usable) + "%; " +
                                     format_bytes(me.total() * (1.0 + r.input.parallel.memory_margin)) + " with the " +
                                     strf("%.3g", 100.0 * r.input.parallel.memory_margin) + "% parallel.memory_margin)")
      << (me.frozen > 0 ? ": frozen base " + format_bytes(me.frozen) + ", adapters " : std::string(": params "))
      << format_bytes(me.params)
      << (me.gathered > 0 ? " (+ " + format_bytes(me.gathered) + " gathered at once)" : std::string()) << ", grads "
      << format_bytes(me.grads) << " (+ " << format_bytes(me.grad_accumulators) << " accumulating), optimizer "
      << format_bytes(me.optimizer) << ", activations " << format_bytes(me.activations) << " (" << c.plan.micro_batch
      << " x " << format_bytes(me.activation_per_sample) << " x " << me.in_flight << " in flight), workspace "
      << format_bytes(me.workspace)
      << (me.host > 0 ? ", + " + format_bytes(me.host) + " offloaded to host memory" : std::string())
      << (me.teacher > 0 ? ", teacher " + format_bytes(me.teacher) + (c.plan.shard_teacher ? " sharded over dp" : "") +
                               " (+ " + format_bytes(me.teacher_activations) + " logits and forward)"
                         : std::string())
      << "\n";
  out << "  time per step   " << strf("%.4g", te.total()) << " s: compute " << strf("%.3g", te.compute) << ", overhead "
      << strf("%.3g", te.overhead) << ", tp comm " << strf("%.3g", te.tp_comm) << ", pp comm "
      << strf("%.3g", te.pp_comm) << ", bubble " << strf("%.3g", te.bubble) << " ("
      << strf("%.0f", 100 * te.bubble_fraction) << "%), dp comm " << strf("%.3g", te.dp_comm) << ", ZeRO "
      << strf("%.3g", te.zero_comm) << ", optimizer " << strf("%.3g", te.optimizer)
      << (c.plan.chunk > 0 ? ", bitwise " + strf("%.3g", te.reproducible) : std::string()) << "\n";
  if (c.plan.chunk > 0 && te.off_total > 0) {
    out << "  bitwise mode    chunk " << c.plan.chunk << " (" << c.plan.chunks()
        << " a step, kept by later stages): " << strf("%+.1f", 100.0 * (te.total() / te.off_total - 1.0))
        << "% step time against " << strf("%.4g", te.off_total)
        << " s with train.reproducible = \"off\" (estimate; bench/bench_reproducible.sh"
        << " measures it)\n";
  }
  if (r.job.total_steps > 0) {
    const double finish = te.total() * static_cast<double>(r.job.total_steps);
    out << "  to finish       " << format_duration_words(finish) << ", "
        << strf("%.1f", finish * static_cast<double>(s.world) / 3600.0) << " " << unit << "-hours\n";
  }
  out << "  why             " << c.why << "\n";
  if (o.explain) {
    out << "  activations     per sample " << format_bytes(me.activation_per_sample_no_recompute)
        << " without recompute, " << format_bytes(me.activation_per_sample_recompute) << " with\n";
    out << "  profile         " << profile_to_json(s.profile).dump() << "\n";
  }
}

void render_alternatives(const PlanOptions& o, const PlanReport& r, std::ostream& out) {
  const auto& cands = r.candidates;
  int64_t feasible = 0;
  for (const auto& c : cands) feasible += c.feasible;
  const size_t max_rows = o.explain ? cands.size() : 8;
  size_t shown = 0;
  if (feasible > 1) {
    out << "\nalternatives (by s/step; one that leaves " << r.unit << "s idle counts "
        << strf("%.0f", 100.0 * kIdleRankMargin) << "% slower; as fast: more " << r.unit << "s, then less memory"
        << (o.explain ? "" : "; --explain lists every candidate") << "):\n";
    out << "  " << pad("#", 4) << pad("layout", 36) << rpad("GiB/" + r.unit, 10) << rpad("s/step", 10)
        << "   why it lost\n";
    for (const auto& c : cands) {
      if (!c.feasible || c.rank == 1) continue;
      if (shown++ >= max_rows) break;
      out << "  " << pad(std::to_string(c.rank), 4) << pad(short_layout(c.plan), 36)
          << rpad(format_gib(c.memory.total()), 10) << rpad(strf("%.4g", c.time.total()), 10) << "   " << c.why << "\n";
    }
  }
  shown = 0;
  const size_t infeasible = cands.size() - static_cast<size_t>(feasible);
  if (infeasible > 0) {
    out << "\nnot feasible (" << infeasible
        << (o.explain ? "" : "; closest first: tight, then over memory; --explain lists all") << "):\n";
    for (const auto& c : cands) {
      if (c.feasible) continue;
      if (shown++ >= (o.explain ? cands.size() : 6)) break;
      out << "  " << pad(short_layout(c.plan), 40) << c.why << "\n";
    }
  }
}

void render_what_if(const PlanReport& r, std::ostream& out) {
  const std::string& unit = r.unit;
  const int64_t steps = r.job.total_steps;
  out << "\nwhat-if over " << unit << " counts (parallel.mode = auto, global_batch " << r.cfg.train.global_batch
      << "):\n";
  out << "  " << rpad(unit + "s", 6) << rpad("nodes", 7) << "  " << pad("layout", 32) << rpad("s/step", 10)
      << rpad("to finish", 12) << rpad(unit + "-hours", 12) << rpad("GiB/" + unit, 10) << "\n";
  for (const auto& row : r.rows) {
    out << "  " << rpad(std::to_string(row.gpus), 6) << rpad(std::to_string(row.nodes), 7) << "  ";
    if (!row.feasible) {
      out << "does not fit: " << row.why << "\n";
      continue;
    }
    const double step = row.best.time.total();
    const double finish = step * static_cast<double>(steps);
    out << pad(short_layout(row.best.plan), 32) << rpad(strf("%.4g", step), 10)
        << rpad(steps > 0 ? format_duration_words(finish) : "unknown", 12)
        << rpad(steps > 0 ? strf("%.1f", finish * static_cast<double>(row.gpus) / 3600.0) : "unknown", 12)
        << rpad(format_gib(row.best.memory.total()), 10) << "\n";
  }
}

// With [[schedule.window]] quota windows, the admin's question before anything runs: when the run is
// done, each stage on the GPUs of the window it starts in (launcher/chain/window_calendar.h), and the
// resource-request paragraph gtrain report has. Empty without windows or a known step count.
struct WindowsPlan {
  std::string calendar, request;
  json calendar_json, request_json;
};
WindowsPlan windows_plan(const PlanOptions& o, const PlanReport& r) {
  WindowsPlan out;
  const std::vector<WindowConfig>& configured = r.cfg.schedule.window;
  if (configured.empty() || r.job.total_steps <= 0) return out;
  CalendarInput in;
  for (size_t i = 0; i < configured.size(); ++i)
    in.windows.push_back(parse_window(configured[i], "schedule.window[" + std::to_string(i) + "]"));
  Setup s = r.setup;  // the table's counts and each window's cap (no cap: the planned count)
  std::set<int64_t> counts(s.what_if.begin(), s.what_if.end());
  for (const auto& w : configured) counts.insert(w.max_gpus > 0 ? w.max_gpus : s.world);
  s.what_if.assign(counts.begin(), counts.end());
  const std::vector<WhatIfRow> rows = what_if_rows(o, r.cfg, r.job, s);
  in.now = unix_now();
  in.steps = r.job.total_steps;
  in.limit_s = r.cfg.schedule.time_limit_s;
  in.size_for = [&](int64_t cap) {
    const int64_t g = cap > 0 ? cap : s.world;
    for (const auto& row : rows)
      if (row.gpus == g && row.feasible) return CalendarSize{static_cast<int>(g), row.best.time.total()};
    return CalendarSize{};
  };
  const WindowCalendar c = plan_calendar(in);
  out.calendar = render_calendar(c, configured, in.now);
  out.calendar_json = calendar_json(c, configured);
  PlannedRun run;
  run.model = r.cfg.model.name;
  run.params = r.job.stats.params;
  run.steps = r.job.total_steps;
  run.global_batch = r.cfg.train.global_batch;
  run.tokens_per_sample = r.job.stats.seq_len > 1 ? r.job.stats.seq_len : 0;
  run.precision = r.cfg.precision.dtype;
  run.gpus = s.gpu;
  for (const auto& row : rows) {
    RequestRow q;
    q.units = row.gpus, q.nodes = row.nodes, q.feasible = row.feasible, q.why = row.why;
    if (row.feasible) q.layout = short_layout(row.best.plan), q.step_s = row.best.time.total();
    run.rows.push_back(q);
  }
  out.request = planned_request_paragraph(run);
  out.request_json = out.request;
  return out;
}

}  // namespace

int run_plan_command(const PlanOptions& o, const std::map<std::string, std::string>& env, std::ostream& out,
                     const MeasureMachine& measure) {
  const HardwareInfo hw = query_hardware();
  json doc;
  if (o.calibrate) {
    const CalibrationReport cal = run_calibration(env, hw, measure);
    if (o.json) {
      doc["calibration"] = calibration_json(cal);
    } else {
      render_calibration(cal, out);
    }
    if (o.config_path.empty()) {
      if (o.json) out << doc.dump(2) << "\n";
      return kExitOk;
    }
    if (!o.json) out << "\n";
  }
  if (o.config_path.empty()) {
    throw ConfigError("gtrain plan: a config file is required",
                      "give the config file (gtrain plan CONFIG), or --calibrate to measure this machine");
  }
  const PlanReport report = compute_plan_report(o, env, hw);
  if (o.json) {
    fill_plan_json(o, report, doc);
    if (const WindowsPlan w = windows_plan(o, report); !w.calendar.empty()) {
      doc["calendar"] = w.calendar_json;
      doc["request"] = w.request_json;
    }
    out << doc.dump(2) << "\n";
  } else {
    render_header(o, report, out);
    render_chosen(o, report, out);
    render_alternatives(o, report, out);
    render_what_if(report, out);
    if (report.lora)
      render_lora_suggestion(*report.lora, report.unit, report.setup.world,
                             report.setup.gpu ? report.setup.profile.memory_bytes : 0.0, out);
    if (const WindowsPlan w = windows_plan(o, report); !w.calendar.empty())
      out << "\nquota windows ([[schedule.window]]: each stage on its window's max_gpus, stopped at its close):\n"
          << w.calendar << "request: " << w.request << "\n";
  }
  if (!report.ok) throw ConfigError(report.error.empty() ? "no layout fits" : report.error, report.error_hint);
  return kExitOk;
}

}  // namespace gtrain
