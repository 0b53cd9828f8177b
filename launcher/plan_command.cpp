// plan_command.cpp: `gtrain plan`: describe the job, pick the hardware profile and topology, run the
// planner for the granted (or given) GPU count and for a range of counts, and print it all.
#include "launcher/plan_command.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "launcher/allocation.h"
#include "launcher/calibrate.h"
#include "launcher/run_launch.h"
#include "runtime/common/errors.h"
#include "runtime/data/dataset.h"
#include "runtime/models/model_registry.h"
#include "runtime/train/trainer.h"
#include "strategies/planner.h"

namespace gtrain {
namespace {

using nlohmann::json;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string gib(double bytes) {
  return std::isinf(bytes) ? "unlimited" : fmt("%.2f", bytes / kGiB);
}

// Bytes in a unit that shows them: "512.0 KiB", "37.5 MiB", "45.56 GiB".
std::string human(double bytes) {
  if (std::isinf(bytes)) return "unlimited";
  const double a = std::fabs(bytes);
  if (a >= kGiB) return fmt("%.2f GiB", bytes / kGiB);
  if (a >= 1024.0 * 1024.0) return fmt("%.1f MiB", bytes / (1024.0 * 1024.0));
  return fmt("%.1f KiB", bytes / 1024.0);
}

std::string duration(double s) {
  if (s <= 0 || !std::isfinite(s)) return "unknown";
  if (s < 120) return fmt("%.1f s", s);
  if (s < 7200) return fmt("%.1f min", s / 60);
  if (s < 3 * 86400) return fmt("%.1f h", s / 3600);
  return fmt("%.1f days", s / 86400);
}

std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
}
std::string rpad(const std::string& s, size_t w) {
  return s.size() >= w ? " " + s : std::string(w - s.size(), ' ') + s;
}

std::string short_layout(const Plan& p) {
  if (p.micro_batch <= 0) {
    return "dp" + std::to_string(p.dp) + " tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp);
  }
  return "dp" + std::to_string(p.dp) + " tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp) + " z" +
         std::to_string(p.zero) + " mb" + std::to_string(p.micro_batch) + "x" + std::to_string(p.grad_accum) +
         (p.recompute ? " rc" : "");
}

json memory_json(const MemoryEstimate& m) {
  return {{"total", m.total()},
          {"params", m.params},
          {"grads", m.grads},
          {"grad_accumulators", m.grad_accumulators},
          {"build", m.build},
          {"optimizer", m.optimizer},
          {"activations", m.activations},
          {"workspace", m.workspace},
          {"activation_per_sample", m.activation_per_sample},
          {"activation_per_sample_no_recompute", m.activation_per_sample_no_recompute},
          {"activation_per_sample_recompute", m.activation_per_sample_recompute},
          {"in_flight_micro_batches", m.in_flight}};
}

json time_json(const TimeEstimate& t) {
  return {{"total", t.total()},
          {"compute", t.compute},
          {"overhead", t.overhead},
          {"tp_comm", t.tp_comm},
          {"pp_comm", t.pp_comm},
          {"bubble", t.bubble},
          {"bubble_fraction", t.bubble_fraction},
          {"dp_comm", t.dp_comm},
          {"zero_comm", t.zero_comm},
          {"optimizer", t.optimizer}};
}

json candidate_json(const RankedPlan& r) {
  const Plan& p = r.plan;
  json j = {{"rank", r.rank}, {"feasible", r.feasible},   {"dp", p.dp},  {"tp", p.tp}, {"pp", p.pp},
            {"zero", p.zero}, {"recompute", p.recompute}, {"why", r.why}};
  if (p.micro_batch > 0) {
    j["micro_batch"] = p.micro_batch;
    j["grad_accum"] = p.grad_accum;
    j["global_batch"] = p.global_batch();
    j["memory_bytes"] = r.memory.total();
    j["step_seconds"] = r.time.total();
    j["memory"] = memory_json(r.memory);
    j["time"] = time_json(r.time);
  }
  if (r.missing_bytes > 0) j["missing_bytes"] = r.missing_bytes;
  return j;
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
  double host_memory = 0;   // CPU ranks: the memory the ranks of a node share
  bool count_list = false;  // --gpus gave several counts: the chosen block is for the largest
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
    throw ConfigError("--ranks " + std::to_string(o.ranks) + " plans the ranks gtrain run --ranks " +
                      std::to_string(o.ranks) + " starts here, --gpus " + o.gpus + " GPUs elsewhere: give one of them");
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
      std::string names;
      for (const auto& t : gpu_profile_table()) names += (names.empty() ? "" : ", ") + t.name;
      throw ConfigError("--gpu-type '" + o.gpu_type + "': unknown GPU; known: " + names);
    }
    s.profile = *p;
  } else if (s.gpu) {
    const std::string model = hypothetical ? std::string() : alloc.gpu_model;
    const double mem = hypothetical ? mem_flag : static_cast<double>(alloc.gpu_memory_bytes);
    if (saved && saved->kind == "gpu" && (model.empty() || saved->name == model) && !hypothetical) {
      s.profile = *saved;
    } else if (auto p = find_gpu_profile(model, mem)) {
      s.profile = *p;
    } else if (mem_flag > 0) {
      s.profile = nearest_gpu_profile_by_memory(mem_flag);
      s.notes.push_back("GPU type not given: assuming " + s.profile.name + " rates for " + gib(mem_flag) +
                        " GiB (use --gpu-type)");
    } else {
      s.profile = *find_gpu_profile("A100-80GB");
      s.notes.push_back(std::string("GPU type ") + (model.empty() ? "not given" : "'" + model + "' not in the table") +
                        ": assuming A100-80GB (use --gpu-type)");
    }
  } else {
    s.profile = saved && saved->kind == "cpu" ? *saved : default_cpu_profile(hw.cores);
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
  return in;
}

std::string caps_text(const Capabilities& c) {
  std::string s = "dp";
  if (c.tensor_parallel) s += ", tp";
  if (c.pipeline_parallel) s += ", pp";
  if (c.max_zero > 0) s += ", ZeRO 1-" + std::to_string(c.max_zero);
  if (c.recompute) s += ", recompute";
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
    mult = 1024.0 * 1024.0;
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
  std::string item;
  auto fail = [&] {
    throw ConfigError(what + " '" + text +
                      "': expected a GPU count from 1 to 65536 (e.g. 8) or a list such as 1,2,4,8");
  };
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ',') {
      if (item.empty() || item.size() > 6 || !std::all_of(item.begin(), item.end(), ::isdigit)) fail();
      const int64_t n = std::stoll(item);
      if (n < 1 || n > 65536) fail();
      if (std::find(out.begin(), out.end(), n) != out.end())
        throw ConfigError(what + " '" + text + "': " + std::to_string(n) + " is listed twice");
      out.push_back(n);
      item.clear();
    } else if (text[i] != ' ') {
      item += text[i];
    }
  }
  return out;
}

JobDescription describe_job(const JobConfig& cfg) {
  JobDescription d;
  std::shared_ptr<Dataset> train;
  auto open = [&] {
    if (!train) train = open_datasets(cfg.data, cfg.model, cfg.train.seed).train;
    return train;
  };
  if (auto stats = model_stats_from_config(cfg)) {
    d.stats = *stats;  // sized from the shape: a 13B model is never built here
  } else if (cfg.model.name == "gpt" && cfg.model.plugin.empty()) {
    d.stats = gpt_stats(cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.seq_len, open()->spec().vocab,
                        cfg.model.tied_embeddings, cfg.model.dropout);
  } else {
    auto& reg = ModelRegistry::global();
    if (!cfg.model.plugin.empty()) reg.load_plugin(cfg.model.plugin);
    if (!reg.has(cfg.model.name)) reg.create(cfg.model, DataSpec{});  // names the unknown model
    auto model = reg.create(cfg.model, open()->spec());
    d.stats = model->stats(open()->spec());
  }
  const auto& t = cfg.train;
  if (t.steps > 0) {
    d.total_steps = t.steps;
  } else if (t.tokens > 0 && d.stats.seq_len > 0) {
    d.total_steps = compute_total_steps(t, 0, d.stats.seq_len);
  } else if (t.epochs > 0) {
    d.total_steps = compute_total_steps(t, open()->size(), open()->spec().tokens_per_sample());
  }
  return d;
}

int run_plan_command(const PlanOptions& o, const std::map<std::string, std::string>& env, std::ostream& out) {
  const HardwareInfo hw = query_hardware();
  json doc;
  if (o.calibrate) {
    const std::string path = profile_path(env, hw.hostname);
    if (path.empty()) throw ConfigError("--calibrate: nowhere to save the profile; set GTRAIN_PROFILE_DIR or HOME");
    const Calibration c = calibrate_this_machine(hw);
    save_profile(c.profile, path);
    const bool cpu = c.profile.kind == "cpu";
    if (o.json) {
      doc["calibration"] = {{"device", c.device},
                            {"matmul_fp32_flops", c.matmul_fp32_flops},
                            {"matmul_bf16_flops", c.matmul_bf16_flops},
                            {"copy_bytes_per_s", c.copy_bw},
                            {"allreduce_bytes_per_s", c.profile.intra_node_bw},
                            {"allreduce_measured_by", cpu ? "memcpy proxy" : "table (not measured)"},
                            {"seconds", c.seconds},
                            {"saved_to", path},
                            {"profile", profile_to_json(c.profile)}};
    } else {
      out << "gtrain plan --calibrate: " << c.device << "\n"
          << "  matmul fp32      " << fmt("%.1f", c.matmul_fp32_flops / 1e9) << " GFLOP/s\n"
          << "  matmul bf16      " << fmt("%.1f", c.matmul_bf16_flops / 1e9) << " GFLOP/s\n"
          << "  memory copy      " << fmt("%.2f", c.copy_bw / 1e9) << " GB/s (read + write)\n"
          << "  allreduce bw     " << fmt("%.2f", c.profile.intra_node_bw / 1e9) << " GB/s "
          << (cpu ? "(memcpy proxy: half the copy bandwidth; measured over MPI once the communicator exists)"
                  : "(from the table; not measured yet)")
          << "\n  saved to " << path << " (" << fmt("%.1f", c.seconds) << " s); later plans on this host use it\n";
    }
    if (o.config_path.empty()) {
      if (o.json) out << doc.dump(2) << "\n";
      return kExitOk;
    }
    if (!o.json) out << "\n";
  }
  if (o.config_path.empty()) throw ConfigError("gtrain plan: a config file is required (or --calibrate)");

  const JobConfig cfg = load_job_config(o.config_path, o.sets, env);
  const JobDescription d = describe_job(cfg);
  const Setup s = resolve_setup(o, env, hw, cfg);
  const PlannerInput in = planner_input(cfg, d, s, s.world, o.runnable);
  const auto cands = plan_candidates(in);  // explicit layouts with wrong factors throw here
  const bool ok = !cands.empty() && cands.front().feasible;
  const std::string unit = cpu_or_gpu(s);
  const double usable = usable_memory_bytes(in);

  // What-if over device counts, always in auto mode.
  std::vector<WhatIfRow> rows;
  JobConfig auto_cfg = cfg;
  auto_cfg.parallel.mode = "auto";
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
      // The closest miss: the least memory short, else why dp cannot split the batch.
      for (const auto& r : all) {
        if (!r.structural && r.missing_bytes > 0) {
          row.why = "needs " + human(r.memory.total()) + " per " + cpu_or_gpu(s) + " at best (" + short_layout(r.plan) +
                    "), " + human(r.missing_bytes) + " missing";
          break;
        }
      }
      if (row.why.empty()) {
        for (const auto& r : all) {
          if (r.plan.tp == 1 && r.plan.pp == 1) row.why = r.why;
        }
      }
    }
    rows.push_back(row);
  }
  std::string error;
  if (!ok) {
    try {
      plan_job(in);
    } catch (const ConfigError& e) {
      error = e.what();
    }
  }

  if (o.json) {
    const auto& m = d.stats;
    doc["config"] = o.config_path;
    doc["model"] = {{"name", cfg.model.name}, {"params", m.params},
                    {"blocks", m.blocks},     {"heads", m.heads},
                    {"hidden", m.hidden},     {"seq_len", m.seq_len},
                    {"vocab", m.vocab},       {"flops_per_sample", m.flops_per_sample}};
    doc["global_batch"] = cfg.train.global_batch;
    doc["steps"] = d.total_steps > 0 ? json(d.total_steps) : json(nullptr);
    doc["precision"] = cfg.precision.dtype;
    doc["world"] = s.world;
    doc["unit"] = unit;
    doc["gpus_per_node"] = in.gpus_per_node;
    doc["nodes"] = (s.world + in.gpus_per_node - 1) / in.gpus_per_node;
    doc["source"] = s.source;
    doc["usable_memory_bytes"] = std::isinf(usable) ? json(nullptr) : json(usable);
    doc["hardware"] = profile_to_json(s.profile);
    doc["capabilities"] = {{"max_zero", in.caps.max_zero},
                           {"tensor_parallel", in.caps.tensor_parallel},
                           {"pipeline_parallel", in.caps.pipeline_parallel},
                           {"recompute", in.caps.recompute}};
    doc["chosen"] = ok ? candidate_json(cands.front()) : json(nullptr);
    json cj = json::array();
    for (const auto& r : cands) cj.push_back(candidate_json(r));
    doc["candidates"] = cj;
    json wj = json::array();
    for (const auto& r : rows) {
      json x = {{"gpus", r.gpus}, {"nodes", r.nodes}, {"feasible", r.feasible}};
      if (r.feasible) {
        const double step = r.best.time.total();
        x["plan"] = candidate_json(r.best);
        x["step_seconds"] = step;
        x["memory_bytes"] = r.best.memory.total();
        x["finish_seconds"] = d.total_steps > 0 ? json(step * static_cast<double>(d.total_steps)) : json(nullptr);
        x["gpu_hours"] = d.total_steps > 0
                             ? json(step * static_cast<double>(d.total_steps) * static_cast<double>(r.gpus) / 3600.0)
                             : json(nullptr);
      } else {
        x["why"] = r.why;
      }
      wj.push_back(x);
    }
    doc["what_if"] = wj;
    doc["notes"] = s.notes;
    doc["error"] = error.empty() ? json(nullptr) : json(error);
    out << doc.dump(2) << "\n";
  } else {
    const auto& m = d.stats;
    out << "gtrain plan: " << o.config_path << "\n";
    out << "  model     " << cfg.model.name << ": " << fmt("%.1f", static_cast<double>(m.params) / 1e6) << "M params";
    if (m.blocks > 0) out << ", " << m.blocks << " blocks";
    if (m.heads > 0) out << ", " << m.heads << " heads";
    out << "; " << fmt("%.3g", m.flops_per_sample) << " FLOPs per sample\n";
    out << "  training  global_batch " << cfg.train.global_batch << ", "
        << (d.total_steps > 0 ? std::to_string(d.total_steps) + " steps" : std::string("steps unknown")) << ", "
        << cfg.precision.dtype << ", " << cfg.optimizer.name << "\n";
    out << "  devices   " << s.world << " " << unit << (s.world == 1 ? "" : "s") << " (" << s.source << "), "
        << in.gpus_per_node << " per node\n";
    out << "  profile   " << s.profile.name << " (" << s.profile.source
        << "): " << fmt("%.1f", s.profile.achievable_flops(cfg.precision.dtype) / 1e12) << " TFLOP/s achievable in "
        << cfg.precision.dtype << ", " << (std::isinf(usable) ? std::string("unlimited") : gib(usable) + " GiB")
        << " usable per " << unit << ", links " << fmt("%.1f", s.profile.intra_node_bw / 1e9) << " GB/s in node / "
        << fmt("%.1f", s.profile.inter_node_bw / 1e9) << " GB/s per node across\n";
    const std::string run_caps = caps_text(kRunCapabilities);
    out << "  executors " << caps_text(in.caps)
        << (caps_text(in.caps) == run_caps ? " (all executed by gtrain run)"
                                           : " (gtrain run executes " + run_caps + "; --runnable plans for that)")
        << "\n";
    for (const auto& n : s.notes) out << "  note      " << n << "\n";
    out << "\n";
    if (ok) {
      const RankedPlan& c = cands.front();
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
      out << "  memory per " << unit << "  " << human(me.total()) << " of " << human(usable) << ": params "
          << human(me.params) << ", grads " << human(me.grads) << " (+ " << human(me.grad_accumulators)
          << " accumulating), optimizer " << human(me.optimizer) << ", activations " << human(me.activations) << " ("
          << c.plan.micro_batch << " x " << human(me.activation_per_sample) << " x " << me.in_flight
          << " in flight), workspace " << human(me.workspace) << "\n";
      out << "  time per step   " << fmt("%.4g", te.total()) << " s: compute " << fmt("%.3g", te.compute)
          << ", overhead " << fmt("%.3g", te.overhead) << ", tp comm " << fmt("%.3g", te.tp_comm) << ", pp comm "
          << fmt("%.3g", te.pp_comm) << ", bubble " << fmt("%.3g", te.bubble) << " ("
          << fmt("%.0f", 100 * te.bubble_fraction) << "%), dp comm " << fmt("%.3g", te.dp_comm) << ", ZeRO "
          << fmt("%.3g", te.zero_comm) << ", optimizer " << fmt("%.3g", te.optimizer) << "\n";
      if (d.total_steps > 0) {
        const double finish = te.total() * static_cast<double>(d.total_steps);
        out << "  to finish       " << duration(finish) << ", "
            << fmt("%.1f", finish * static_cast<double>(s.world) / 3600.0) << " " << unit << "-hours\n";
      }
      out << "  why             " << c.why << "\n";
      if (o.explain) {
        out << "  activations     per sample " << human(me.activation_per_sample_no_recompute) << " without recompute, "
            << human(me.activation_per_sample_recompute) << " with\n";
        out << "  profile         " << profile_to_json(s.profile).dump() << "\n";
      }
    } else {
      out << "chosen: none fits on " << s.world << " " << unit << (s.world == 1 ? "" : "s") << "\n  " << error << "\n";
    }

    // Alternatives.
    int64_t feasible = 0;
    for (const auto& r : cands) feasible += r.feasible;
    const size_t max_rows = o.explain ? cands.size() : 8;
    size_t shown = 0;
    if (feasible > 1) {
      out << "\nalternatives" << (o.explain ? "" : " (fastest first; --explain lists every candidate)") << ":\n";
      out << "  " << pad("#", 4) << pad("layout", 30) << rpad("GiB/" + unit, 10) << rpad("s/step", 10)
          << "   why it lost\n";
      for (const auto& r : cands) {
        if (!r.feasible || r.rank == 1) continue;
        if (shown++ >= max_rows) break;
        out << "  " << pad(std::to_string(r.rank), 4) << pad(short_layout(r.plan), 30)
            << rpad(gib(r.memory.total()), 10) << rpad(fmt("%.4g", r.time.total()), 10) << "   " << r.why << "\n";
      }
    }
    shown = 0;
    const size_t infeasible = cands.size() - static_cast<size_t>(feasible);
    if (infeasible > 0) {
      out << "\nnot feasible (" << infeasible << (o.explain ? "" : "; closest first, --explain lists all") << "):\n";
      for (const auto& r : cands) {
        if (r.feasible) continue;
        if (shown++ >= (o.explain ? cands.size() : 6)) break;
        out << "  " << pad(short_layout(r.plan), 34) << r.why << "\n";
      }
    }

    out << "\nwhat-if over " << unit << " counts (parallel.mode = auto, global_batch " << cfg.train.global_batch
        << "):\n";
    out << "  " << rpad(unit + "s", 6) << rpad("nodes", 7) << "  " << pad("layout", 28) << rpad("s/step", 10)
        << rpad("to finish", 12) << rpad(unit + "-hours", 12) << rpad("GiB/" + unit, 10) << "\n";
    for (const auto& r : rows) {
      out << "  " << rpad(std::to_string(r.gpus), 6) << rpad(std::to_string(r.nodes), 7) << "  ";
      if (!r.feasible) {
        out << "does not fit: " << r.why << "\n";
        continue;
      }
      const double step = r.best.time.total();
      const double finish = step * static_cast<double>(d.total_steps);
      out << pad(short_layout(r.best.plan), 28) << rpad(fmt("%.4g", step), 10)
          << rpad(d.total_steps > 0 ? duration(finish) : "unknown", 12)
          << rpad(d.total_steps > 0 ? fmt("%.1f", finish * static_cast<double>(r.gpus) / 3600.0) : "unknown", 12)
          << rpad(gib(r.best.memory.total()), 10) << "\n";
    }
  }
  if (!ok) throw ConfigError(error.empty() ? "no layout fits" : error);
  return kExitOk;
}

}  // namespace gtrain
