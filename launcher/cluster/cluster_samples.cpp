// cluster_samples.cpp: the samples gtrain keeps of a cluster during its own stages, their file and
// the stage's sampling thread.
#include "launcher/cluster/cluster_samples.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/schedule.h"
#include "runtime/core/unique_fd.h"
#include "strategies/planner/hardware_profile.h"

namespace gtrain {

namespace fs = std::filesystem;

namespace {

constexpr std::uintmax_t kPruneAbove = 2u << 20;  // bytes
constexpr int64_t kKeep = 366 * 86400;            // seconds of samples a pruned file keeps

// Rewrites `path` (held locked by the caller) without the samples older than a year.
void prune(const std::string& path, int64_t now) {
  std::string kept;
  for (const auto& s : read_cluster_samples(path)) {
    if (s.time >= now - kKeep) kept += nlohmann::json(s).dump() + "\n";
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    if (!out) return;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
}

// Whether any cluster's samples file in `dir` changed less than `gap_s` ago.
bool recently_sampled(const std::string& dir, double gap_s) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".jsonl") continue;
    const auto t = fs::last_write_time(e.path(), ec);
    if (!ec && std::chrono::duration<double>(now - t).count() < gap_s) return true;
  }
  return false;
}

}  // namespace

void to_json(nlohmann::json& j, const ClusterSample& s) {
  j = {{"time", s.time},
       {"scheduler", s.scheduler},
       {"cluster", s.cluster},
       {"partition", s.partition},
       {"job", s.job},
       {"gpus", s.gpus},
       {"free_gpus", s.free_gpus},
       {"pending_jobs", s.pending_jobs},
       {"pending_gpus", s.pending_gpus},
       {"running_jobs", s.running_jobs}};
}

void from_json(const nlohmann::json& j, ClusterSample& s) {
  s.time = j.at("time").get<int64_t>();
  s.scheduler = j.value("scheduler", "");
  s.cluster = j.value("cluster", "");
  s.partition = j.at("partition").get<std::string>();
  s.job = j.value("job", "");
  s.gpus = j.value("gpus", int64_t{0});
  s.free_gpus = j.at("free_gpus").get<int64_t>();
  s.pending_jobs = j.value("pending_jobs", int64_t{-1});
  s.pending_gpus = j.value("pending_gpus", int64_t{-1});
  s.running_jobs = j.value("running_jobs", int64_t{-1});
}

std::string cluster_samples_path(const std::map<std::string, std::string>& env, const std::string& scheduler,
                                 const std::string& cluster) {
  const std::string dir = profile_dir(env);
  if (dir.empty()) return "";
  std::string name = cluster.empty() ? "default" : cluster;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return dir + "/cluster/" + scheduler + "-" + name + ".jsonl";
}

std::vector<ClusterSample> samples_of(const ClusterReading& r, int64_t now, const std::string& job) {
  std::vector<ClusterSample> out;
  for (const auto& p : r.partitions) {
    if (p.free_gpus < 0 || p.gpus <= 0) continue;
    ClusterSample s;
    s.time = now, s.scheduler = r.scheduler, s.cluster = r.cluster, s.partition = p.name, s.job = job;
    s.gpus = p.gpus, s.free_gpus = p.free_gpus;
    s.pending_jobs = p.pending_jobs, s.pending_gpus = p.pending_gpus, s.running_jobs = p.running_jobs;
    out.push_back(std::move(s));
  }
  return out;
}

bool append_cluster_samples(const std::string& path, const std::vector<ClusterSample>& samples) {
  if (path.empty() || samples.empty()) return false;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return false;
  std::string lines;
  for (const auto& s : samples) lines += nlohmann::json(s).dump() + "\n";
  const UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!fd || ::flock(fd.get(), LOCK_EX) != 0) return false;
  if (fs::file_size(path, ec) <= kPruneAbove || ec) return write_all(fd.get(), lines);
  prune(path, samples.front().time);
  // The rename replaced the file this descriptor appends to (still locked): append to the new one.
  const UniqueFd fresh(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  return fresh && write_all(fresh.get(), lines);
}

std::vector<ClusterSample> read_cluster_samples(const std::string& path, int* skipped) {
  std::vector<ClusterSample> out;
  if (skipped) *skipped = 0;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line).get<ClusterSample>());
    } catch (const std::exception&) {
      if (skipped) ++*skipped;
    }
  }
  return out;
}

std::vector<FreeSample> free_samples(const std::vector<ClusterSample>& samples, const std::string& partition) {
  std::vector<FreeSample> out;
  for (const auto& s : samples) {
    if (s.partition == partition && s.free_gpus >= 0) out.push_back({s.time, s.free_gpus});
  }
  return out;
}

std::vector<ClusterSample> kept_cluster_samples(const std::map<std::string, std::string>& env, const ClusterReading& r,
                                                int* skipped) {
  return read_cluster_samples(cluster_samples_path(env, r.scheduler, r.cluster), skipped);
}

std::vector<HistoryJob> partition_jobs(const ClusterReading& r, const std::string& partition) {
  std::vector<HistoryJob> out;
  for (const auto& j : r.history)
    if (j.partition == partition) out.push_back(j);
  return out;
}

WeekProfile partition_profile(const ClusterReading& r, const PartitionFacts& p, int64_t from, int64_t to,
                              const std::vector<ClusterSample>& samples) {
  return build_week_profile(partition_jobs(r, p.name), p.gpus, from, to, free_samples(samples, p.name), r.history_read);
}

std::vector<ClusterSample> record_cluster_samples(const SchedulerBackend& b,
                                                  const std::map<std::string, std::string>& env, int64_t now,
                                                  double timeout_s, double min_gap_s,
                                                  const std::function<bool()>& cancelled) {
  if (min_gap_s > 0 && recently_sampled(profile_dir(env) + "/cluster", min_gap_s)) return {};
  ClusterQuery q;
  q.read_history = false, q.read_quotas = false, q.read_reservations = false;
  const CommandRunner system = system_command_runner(timeout_s);
  const CommandRunner run = [&](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (cancelled && cancelled()) return std::nullopt;
    return system(argv);
  };
  ClusterReading r;
  try {
    r = b.read_cluster(q, run);
  } catch (const std::exception&) {
    return {};  // a scheduler that cannot be read now: no sample, the stage goes on
  }
  const auto job = env.find(b.job_id_variable());
  auto samples = samples_of(r, now, job == env.end() ? "" : job->second);
  if (!append_cluster_samples(cluster_samples_path(env, r.scheduler, r.cluster), samples)) return {};
  return samples;
}

ClusterSampler::ClusterSampler(std::function<void(const std::function<bool()>& cancelled)> sample, double every_s) {
  // The thread starts with every signal blocked (it inherits this thread's mask, restored after).
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  thread_ = std::thread([this, sample = std::move(sample), every_s]() {
    const auto cancelled = [this]() {
      std::lock_guard<std::mutex> l(mu_);
      return stop_;
    };
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      l.unlock();
      sample(cancelled);
      l.lock();
      wake_.wait_for(l, std::chrono::duration<double>(every_s), [this]() { return stop_; });
    }
  });
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

ClusterSampler::~ClusterSampler() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::unique_ptr<ClusterSampler> start_cluster_sampler(const SchedulerBackend& b,
                                                      const std::map<std::string, std::string>& env,
                                                      double every_minutes) {
  if (!b.is_batch_scheduler() || !b.can_submit() || every_minutes <= 0) return nullptr;
  return std::make_unique<ClusterSampler>(
      [&b, env, every_minutes](const std::function<bool()>& cancelled) {
        record_cluster_samples(b, env, static_cast<int64_t>(unix_now()), 5.0, every_minutes * 60 * 0.9, cancelled);
      },
      every_minutes * 60);
}

}  // namespace gtrain
