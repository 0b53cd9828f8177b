// hardware_profile.cpp: the GPU table, name matching, and profile JSON files.
#include "strategies/planner/hardware_profile.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "runtime/core/errors.h"

namespace gtrain {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

constexpr double kMiB = 1024.0 * 1024.0;

HardwareProfile gpu(const char* name, double mem_mib, double fp32_t, double bf16_t, double fp16_t, double eff,
                    double hbm_gbs, double intra_gbs, double inter_gbs) {
  HardwareProfile p;
  p.name = name;
  p.kind = DeviceKind::gpu;
  p.memory_bytes = mem_mib * kMiB;
  p.fp32_flops = fp32_t * 1e12;
  p.bf16_flops = bf16_t * 1e12;
  p.fp16_flops = fp16_t * 1e12;
  p.efficiency = eff;
  p.memory_bw = hbm_gbs * 1e9;
  p.intra_node_bw = intra_gbs * 1e9;
  p.inter_node_bw = inter_gbs * 1e9;
  // A two-socket host's AdamW streams ~20 GB/s with every core; PCIe Gen4/5 x16 moves ~25 GB/s a way.
  p.host_memory_bw = 20e9;
  p.host_link_bw = 25e9;
  p.latency_s = 15e-6;
  p.launch_overhead_s = 5e-6;
  // Not allocatable by the training process: a CUDA 12 context (~0.5 GiB with lazy module loading)
  // and NCCL's communicator buffers (a few hundred MiB for a node of 8): public figures, to be
  // measured on a lent device (free memory after init against the total). Inside the caching
  // allocator, besides the tensors: cuBLAS / cuBLASLt workspaces and autocast's caches (workspace),
  // and the allocator's fragmentation, a fraction of what each step allocates and frees.
  p.reserved_bytes = 1.0 * kGiB;
  p.workspace_bytes = 0.5 * kGiB;
  p.fragmentation = 0.05;
  p.source = "table";
  return p;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

double HardwareProfile::achievable_flops(const std::string& precision) const {
  const double peak = precision == "bf16" ? bf16_flops : precision == "fp16" ? fp16_flops : fp32_flops;
  return std::max(1.0, peak * efficiency);
}

namespace {
// Where `threads` sits between one thread (0) and every core (1).
double core_fraction(double threads, int cores) {
  if (cores <= 1) return 0.0;
  const double t = std::max(1.0, std::min(threads, static_cast<double>(cores)));
  return (t - 1.0) / static_cast<double>(cores - 1);
}
}  // namespace

double HardwareProfile::matmul_rate(double n, double threads) const {
  const double one = fp32_flops_1thread * n / (n + matmul_half_size);
  const double all = fp32_flops * (1024.0 + matmul_half_size_all) / 1024.0 * n / (n + matmul_half_size_all);
  const double f = core_fraction(threads, cores);
  return one + f * (std::max(all, one) - one);
}

double HardwareProfile::memory_bound_rate(double threads) const {
  return 1.0 + core_fraction(threads, cores) * (std::max(1.0, memory_bound_speedup) - 1.0);
}

double HardwareProfile::block_rate(double threads) const {
  return 1.0 + core_fraction(threads, cores) * (std::max(1.0, block_speedup) - 1.0);
}

const std::vector<HardwareProfile>& gpu_profile_table() {
  // name, MiB total (as nvidia-smi reports it: an "80GB" H100 has 81559 MiB, 79.6 GiB), fp32 / bf16
  // / fp16 dense TFLOP/s, efficiency, HBM GB/s, NVLink (or PCIe) allreduce bus GB/s, network GB/s
  // per node. fp32 is plain FP32 (PyTorch does not use TF32 for matmul by default). V100 has no
  // bf16 units: bf16 runs near the fp32 rate. The totals are public nvidia-smi figures, not yet
  // measured on a lent device.
  static const std::vector<HardwareProfile> table = {
      gpu("V100-32GB", 32510, 15.7, 15.7, 125, 0.35, 900, 130, 12.5),
      gpu("A100-40GB", 40960, 19.5, 312, 312, 0.45, 1555, 230, 25),
      gpu("A100-80GB", 81920, 19.5, 312, 312, 0.45, 2039, 230, 25),
      gpu("H100-80GB", 81559, 67, 989, 989, 0.40, 3350, 360, 50),
      gpu("H200", 143771, 67, 989, 989, 0.40, 4800, 360, 50),
      gpu("L40S", 46068, 91.6, 362, 362, 0.35, 864, 20, 25),
  };
  return table;
}

HardwareProfile default_cpu_profile(int cores) {
  HardwareProfile p;  // the struct defaults are the per-core CPU figures
  const double c = std::max(1, cores);
  p.name = "cpu";
  p.kind = DeviceKind::cpu;
  p.fp32_flops = 50e9 * c;  // ~50 GFLOP/s per core peak (AVX2 FMA), half reached in training
  p.bf16_flops = 25e9 * c;  // no bf16 matmul units assumed
  p.fp16_flops = 25e9 * c;
  p.efficiency = 0.5;
  // Host memory: the program itself is already resident (no device context to reserve), but the
  // glibc heap's high-water mark runs ~30% above live tensors (freed blocks of other sizes are not
  // reused at once). Measured against VmHWM for several GPT shapes (tests/test_memory_estimate.cpp);
  // 1F1B pipelines fragment more (strategies/cost_model.cpp).
  p.workspace_bytes = 8.0 * 1024 * 1024;
  p.fragmentation = 0.40;
  p.source = "default";
  p.note = "not calibrated: run gtrain plan --calibrate to measure this machine";
  return p;
}

std::optional<HardwareProfile> find_gpu_profile(const std::string& model, double memory_bytes) {
  const std::string m = lower(model);
  if (m.empty()) return std::nullopt;
  auto get = [](const std::string& name) {
    for (const auto& p : gpu_profile_table()) {
      if (p.name == name) return p;
    }
    return gpu_profile_table().front();
  };
  auto has = [&](const char* s) { return m.find(s) != std::string::npos; };
  // Exact table names first ("a100-40gb").
  for (const auto& p : gpu_profile_table()) {
    if (lower(p.name) == m) return p;
  }
  const double gib = memory_bytes / kGiB;
  if (has("h200")) return get("H200");
  if (has("h100")) return get("H100-80GB");
  if (has("l40s")) return get("L40S");
  if (has("a100")) {
    if (has("40g")) return get("A100-40GB");
    if (has("80g")) return get("A100-80GB");
    if (memory_bytes > 0) return get(gib < 60 ? "A100-40GB" : "A100-80GB");
    return get("A100-80GB");
  }
  if (has("v100")) {
    HardwareProfile p = get("V100-32GB");
    if (has("16g") || (memory_bytes > 0 && gib < 24)) {
      p.name = "V100-16GB";
      p.memory_bytes = 16160 * kMiB;  // nvidia-smi's total for a V100-16GB
    }
    return p;
  }
  return std::nullopt;
}

HardwareProfile nearest_gpu_profile_by_memory(double memory_bytes) {
  const auto& t = gpu_profile_table();
  const HardwareProfile* best = &t.front();
  for (const auto& p : t) {
    // Ties (A100-80GB, H100-80GB) keep the first: the more common part.
    if (std::fabs(p.memory_bytes - memory_bytes) < std::fabs(best->memory_bytes - memory_bytes)) best = &p;
  }
  return *best;
}

HardwareProfile shared_gpu_profile(const HardwareProfile& p, int ranks) {
  if (ranks <= 1) return p;
  HardwareProfile s = p;
  const double n = ranks;
  s.name = p.name + " shared by " + std::to_string(ranks) + " ranks";
  s.memory_bytes = p.memory_bytes / n;  // usable_bytes(): each rank still loses reserved_bytes
  s.fp32_flops = p.fp32_flops / n;
  s.bf16_flops = p.bf16_flops / n;
  s.fp16_flops = p.fp16_flops / n;
  s.memory_bw = p.memory_bw / n;
  s.host_link_bw = p.host_link_rate() / n;
  s.host_memory_bw = p.host_memory_rate() / n;
  // Staged collectives: each rank copies its buffer down, MPI reduces it in host memory, and the
  // result comes back up; all of it over the one host link.
  s.intra_node_bw = std::min(p.intra_node_bw, p.host_link_rate() / (2 * n));
  s.note = (p.note.empty() ? "" : p.note + "; ") + "one GPU shared by " + std::to_string(ranks) +
           " ranks: memory and rates split, collectives through host memory";
  return s;
}

std::string profile_dir(const std::map<std::string, std::string>& env) {
  auto it = env.find("GTRAIN_PROFILE_DIR");
  if (it != env.end() && !it->second.empty()) return it->second;
  it = env.find("HOME");
  if (it != env.end() && !it->second.empty()) return it->second + "/.cache/gtrain";
  return "";
}

std::string profile_path(const std::map<std::string, std::string>& env, const std::string& hostname) {
  const std::string dir = profile_dir(env);
  if (dir.empty()) return "";
  return dir + "/profile-" + (hostname.empty() ? std::string("localhost") : hostname) + ".json";
}

nlohmann::json profile_to_json(const HardwareProfile& p) {
  return {{"name", p.name},
          {"kind", name_of(p.kind)},
          {"memory_bytes", p.memory_bytes},
          {"fp32_flops", p.fp32_flops},
          {"bf16_flops", p.bf16_flops},
          {"fp16_flops", p.fp16_flops},
          {"efficiency", p.efficiency},
          {"memory_bw", p.memory_bw},
          {"intra_node_bw", p.intra_node_bw},
          {"inter_node_bw", p.inter_node_bw},
          {"host_memory_bw", p.host_memory_bw},
          {"host_link_bw", p.host_link_bw},
          {"cores", p.cores},
          {"fp32_flops_1thread", p.fp32_flops_1thread},
          {"matmul_half_size", p.matmul_half_size},
          {"matmul_half_size_all", p.matmul_half_size_all},
          {"elementwise_bw", p.elementwise_bw},
          {"attention_flops_1thread", p.attention_flops_1thread},
          {"norm_s", p.norm_s},
          {"activation_s", p.activation_s},
          {"softmax_s", p.softmax_s},
          {"optimizer_s", p.optimizer_s},
          {"memory_bound_speedup", p.memory_bound_speedup},
          {"block_remainder_s", p.block_remainder_s},
          {"block_speedup", p.block_speedup},
          {"latency_s", p.latency_s},
          {"launch_overhead_s", p.launch_overhead_s},
          {"reserved_bytes", p.reserved_bytes},
          {"workspace_bytes", p.workspace_bytes},
          {"fragmentation", p.fragmentation},
          {"source", p.source},
          {"note", p.note}};
}

HardwareProfile profile_from_json(const nlohmann::json& j, const std::string& origin) {
  HardwareProfile p;
  auto num = [&](const char* k, double* out) {
    if (!j.contains(k) || !j.at(k).is_number() || !(j.at(k).get<double>() >= 0)) {
      throw ConfigError(origin + ": hardware profile field '" + k + "' must be a non-negative number");
    }
    *out = j.at(k).get<double>();
  };
  auto str = [&](const char* k, std::string* out) {
    if (!j.contains(k)) return;
    if (!j.at(k).is_string()) throw ConfigError(origin + ": hardware profile field '" + k + "' must be a string");
    *out = j.at(k).get<std::string>();
  };
  if (!j.is_object()) throw ConfigError(origin + ": a hardware profile must be a JSON object");
  str("name", &p.name);
  std::string kind = name_of(p.kind);
  str("kind", &kind);
  const auto parsed = enum_from_name<DeviceKind>(kind);
  if (!parsed) throw ConfigError(origin + ": hardware profile 'kind' must be \"cpu\" or \"gpu\"");
  p.kind = *parsed;
  num("memory_bytes", &p.memory_bytes);
  num("fp32_flops", &p.fp32_flops);
  num("bf16_flops", &p.bf16_flops);
  num("fp16_flops", &p.fp16_flops);
  num("efficiency", &p.efficiency);
  num("memory_bw", &p.memory_bw);
  num("intra_node_bw", &p.intra_node_bw);
  num("inter_node_bw", &p.inter_node_bw);
  // Optional (profiles saved before optimizer offload lack them): 0 means memory_bw.
  if (j.contains("host_memory_bw")) num("host_memory_bw", &p.host_memory_bw);
  if (j.contains("host_link_bw")) num("host_link_bw", &p.host_link_bw);
  // Optional (profiles saved before per-thread calibration lack them): 0 = not measured.
  double cores = 0;
  if (j.contains("cores")) num("cores", &cores);
  p.cores = static_cast<int>(std::min(cores, 1e6));
  if (j.contains("fp32_flops_1thread")) num("fp32_flops_1thread", &p.fp32_flops_1thread);
  for (auto [key, field] : {std::pair<const char*, double*>{"elementwise_bw", &p.elementwise_bw},
                            {"attention_flops_1thread", &p.attention_flops_1thread},
                            {"norm_s", &p.norm_s},
                            {"activation_s", &p.activation_s},
                            {"softmax_s", &p.softmax_s},
                            {"optimizer_s", &p.optimizer_s},
                            {"memory_bound_speedup", &p.memory_bound_speedup},
                            {"block_remainder_s", &p.block_remainder_s},
                            {"block_speedup", &p.block_speedup},
                            {"matmul_half_size", &p.matmul_half_size},
                            {"matmul_half_size_all", &p.matmul_half_size_all}}) {
    if (j.contains(key)) num(key, field);
  }
  num("latency_s", &p.latency_s);
  num("launch_overhead_s", &p.launch_overhead_s);
  if (j.contains("reserved_bytes")) num("reserved_bytes", &p.reserved_bytes);  // optional: older profiles lack it
  num("workspace_bytes", &p.workspace_bytes);
  num("fragmentation", &p.fragmentation);
  str("source", &p.source);
  str("note", &p.note);
  if (p.fp32_flops <= 0 || p.efficiency <= 0 || p.intra_node_bw <= 0 || p.memory_bw <= 0) {
    throw ConfigError(origin + ": hardware profile rates and bandwidths must be > 0");
  }
  return p;
}

void save_profile(const HardwareProfile& p, const std::string& path) {
  std::error_code ec;
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << profile_to_json(p).dump(2) << "\n";
    if (!f)
      throw Error(path + ": cannot write the hardware profile" + (ec ? " (" + ec.message() + ")" : ""),
                  "check that the folder is writable, or set GTRAIN_PROFILE_DIR to another");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    throw Error(path + ": cannot write the hardware profile (" + ec.message() + ")",
                "check that the folder is writable, or set GTRAIN_PROFILE_DIR to another");
}

std::optional<HardwareProfile> load_profile(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();  // "[json.exception.parse_error.101] parse error at line 1, ..."
    if (why.rfind("[json.", 0) == 0 && why.find("] ") != std::string::npos) why = why.substr(why.find("] ") + 2);
    throw ConfigError(path + ": not a valid hardware profile (" + why +
                      "); delete it or run gtrain plan --calibrate again");
  }
  return profile_from_json(j, path);
}

HardwareProfile local_cpu_profile(const std::map<std::string, std::string>& env, const std::string& hostname,
                                  int cores) {
  auto saved = load_profile(profile_path(env, hostname));
  if (saved && saved->kind == DeviceKind::cpu) return *saved;
  return default_cpu_profile(cores);
}

}  // namespace gtrain
