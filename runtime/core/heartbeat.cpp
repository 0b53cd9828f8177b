// heartbeat.cpp: rank heartbeats and the launcher's hang rule (see heartbeat.h).
#include "runtime/core/heartbeat.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/core/format.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr size_t kRecentSteps = 20;

}  // namespace

const char* phase_name(RankPhase p) {
  switch (p) {
    case RankPhase::startup:
      return "start-up";
    case RankPhase::forward:
      return "forward";
    case RankPhase::backward:
      return "backward";
    case RankPhase::grad_sync:
      return "grad sync";
    case RankPhase::optimizer:
      return "optimizer";
    case RankPhase::save:
      return "save";
    case RankPhase::eval:
      return "eval";
    case RankPhase::done:
      return "done";
  }
  return "?";
}

Heartbeat& Heartbeat::get() {
  static auto* h = new Heartbeat();  // never destroyed: the thread may outlive static destruction order
  return *h;
}

void Heartbeat::start(const std::string& dir, int rank, const std::string& host, double period_s) {
  if (dir.empty() || thread_.joinable()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  path_ = (fs::path(dir) / ("rank-" + std::to_string(rank) + ".json")).string();
  rank_ = rank;
  host_ = host;
  period_s_ = period_s;
  progress_unix_.store(unix_now_s());
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stop_ = false;
  }
  write_file();
  thread_ = std::thread([this] {
    const auto period = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(period_s_));
    std::unique_lock<std::mutex> lock(wake_mu_);
    while (!wake_.wait_for(lock, period, [this] { return stop_; })) write_file();
  });
  static const bool at_exit = [] {
    std::atexit([] { Heartbeat::get().stop(); });
    return true;
  }();
  (void)at_exit;
}

void Heartbeat::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  phase(RankPhase::done);
  write_file();
}

void Heartbeat::phase(RankPhase p) {
  phase_.store(static_cast<int>(p));
  progress_unix_.store(unix_now_s());
}

void Heartbeat::step_done(int64_t step, double seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    recent_.push_back(seconds);
    if (recent_.size() > kRecentSteps) recent_.erase(recent_.begin());
  }
  step_.store(step);
  const double now = unix_now_s();
  progress_unix_.store(now);
  if (first_step_unix_.load() == 0) first_step_unix_.store(now);
}

void Heartbeat::measured(RankPhase p, double seconds) {
  if (p == RankPhase::save) save_s_.store(seconds);
  if (p == RankPhase::eval) eval_s_.store(seconds);
}

double Heartbeat::slowest_recent_step_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recent_.empty() ? 0.0 : *std::max_element(recent_.begin(), recent_.end());
}

double Heartbeat::expected_s(RankPhase p) const {
  return p == RankPhase::save ? save_s_.load() : p == RankPhase::eval ? eval_s_.load() : 0.0;
}

std::string Heartbeat::record() const {
  const nlohmann::json j = {{"rank", rank_},
                            {"host", host_},
                            {"pid", static_cast<int64_t>(::getpid())},
                            {"step", step_.load()},
                            {"phase", phase_name(current_phase())},
                            {"progress_unix", progress_unix_.load()},
                            {"beat_unix", unix_now_s()},
                            {"slowest_step_s", slowest_recent_step_s()},
                            {"save_s", save_s_.load()},
                            {"eval_s", eval_s_.load()},
                            {"first_step_unix", first_step_unix_.load()}};
  return j.dump();
}

void Heartbeat::write_file() const {
  if (path_.empty()) return;
  // Written whole, then renamed over the last one: a reader never sees half a record.
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return;  // the run directory went away: the launcher notices the missing beats
    f << record() << "\n";
  }
  std::error_code ec;
  fs::rename(tmp, path_, ec);
}

std::vector<HeartbeatRecord> read_heartbeats(const std::string& dir) {
  std::vector<HeartbeatRecord> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("rank-", 0) != 0 || it->path().extension() != ".json") continue;
    std::ifstream in(it->path());
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object()) continue;
    HeartbeatRecord r;
    r.rank = j.value("rank", -1);
    r.host = j.value("host", std::string());
    r.pid = j.value("pid", int64_t{0});
    r.step = j.value("step", int64_t{0});
    r.phase = j.value("phase", std::string("?"));
    r.progress_unix = j.value("progress_unix", 0.0);
    r.beat_unix = j.value("beat_unix", 0.0);
    r.slowest_step_s = j.value("slowest_step_s", 0.0);
    r.save_s = j.value("save_s", 0.0);
    r.eval_s = j.value("eval_s", 0.0);
    r.first_step_unix = j.value("first_step_unix", 0.0);
    if (r.rank >= 0) out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return out;
}

double stuck_after_s(const HangRule& rule, const std::string& phase, int64_t step, double slowest_step_s, double save_s,
                     double eval_s) {
  const bool save = phase == phase_name(RankPhase::save), eval = phase == phase_name(RankPhase::eval);
  if (save || eval) {
    // A save or an evaluation has its own measured duration; the first one of a stage has none.
    const double measured = save ? save_s : eval_s;
    const double own = measured > 0 ? std::max(rule.min_s, rule.step_factor * measured) : rule.startup_timeout_s;
    return std::max(own, rule.fixed_s);
  }
  if (step == 0 || slowest_step_s <= 0) return std::max(rule.startup_timeout_s, rule.fixed_s);
  if (rule.fixed_s > 0) return rule.fixed_s;
  return std::max(rule.min_s, rule.step_factor * slowest_step_s);
}

std::string find_stuck_rank(const std::vector<HeartbeatRecord>& beats, int ranks, double now_unix, double started_unix,
                            const HangRule& rule, int* stuck_rank) {
  if (stuck_rank) *stuck_rank = -1;
  std::vector<HeartbeatRecord> all(static_cast<size_t>(std::max(0, ranks)));
  for (int r = 0; r < ranks; ++r) {
    all[static_cast<size_t>(r)].rank = r;
    all[static_cast<size_t>(r)].phase = "start-up (no heartbeat yet)";
    all[static_cast<size_t>(r)].progress_unix = started_unix;
    all[static_cast<size_t>(r)].beat_unix = 0;
  }
  double slowest = 0, save_s = 0, eval_s = 0;
  for (const auto& b : beats) {
    if (b.rank < 0 || b.rank >= ranks) continue;
    // A record older than this attempt (a rank that has not written yet) counts as not there.
    if (b.beat_unix < started_unix) continue;
    all[static_cast<size_t>(b.rank)] = b;
    slowest = std::max(slowest, b.slowest_step_s);
    save_s = std::max(save_s, b.save_s);
    eval_s = std::max(eval_s, b.eval_s);
  }
  const HeartbeatRecord* worst = nullptr;
  bool worst_silent = false;
  double worst_limit = 0;
  for (const auto& b : all) {
    const std::string phase = b.phase.rfind("start-up", 0) == 0 ? std::string(phase_name(RankPhase::startup)) : b.phase;
    const double limit = stuck_after_s(rule, phase, b.step, slowest, save_s, eval_s);
    const double idle = now_unix - std::max(b.progress_unix, started_unix);
    if (idle <= limit || b.phase == phase_name(RankPhase::done)) continue;
    // The heartbeat thread itself went quiet (it writes every second): the process is stopped,
    // frozen or gone.
    const bool silent = now_unix - b.beat_unix > 2.5;
    const bool better =
        !worst || (silent && !worst_silent) || (silent == worst_silent && b.progress_unix < worst->progress_unix);
    if (better) {
      worst = &b;
      worst_silent = silent;
      worst_limit = limit;
    }
  }
  if (!worst) return "";
  if (stuck_rank) *stuck_rank = worst->rank;
  const double idle = now_unix - std::max(worst->progress_unix, started_unix);
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(0);
  out << "rank " << worst->rank;
  if (!worst->host.empty())
    out << " (" << worst->host << (worst->pid > 0 ? ", pid " + std::to_string(worst->pid) : "") << ")";
  out << " made no progress for " << idle << " s in " << worst->phase;
  if (worst->step > 0 || worst->beat_unix > 0) out << " after step " << worst->step;
  out << " (limit " << worst_limit << " s)";
  if (worst_silent) out << "; its heartbeat stopped too: the process is stopped, frozen or gone";
  return out.str();
}

double stop_grace_s(const std::vector<HeartbeatRecord>& beats, double save_safety, double min_lead_s) {
  double save = 0;
  for (const auto& b : beats) save = std::max(save, b.save_s);
  return std::max(kMinStopGraceS, save_safety * save + min_lead_s);
}

std::string abandoned_step(const std::vector<HeartbeatRecord>& beats, double requested_unix, double now_unix,
                           double save_safety, double min_lead_s) {
  const double grace = stop_grace_s(beats, save_safety, min_lead_s);
  const double waited = now_unix - requested_unix;
  if (waited < grace || beats.empty()) return "";
  const HeartbeatRecord* busy = nullptr;
  double slowest = 0;
  for (const auto& b : beats) {
    // A save under way is waited for (it commits atomically or not at all), and so is a rank that
    // is done (exiting); a start-up that outlasts the lead has nothing to save either.
    if (b.phase == phase_name(RankPhase::save) || b.phase == phase_name(RankPhase::done)) return "";
    slowest = std::max(slowest, b.slowest_step_s);
    if (!busy || b.progress_unix < busy->progress_unix) busy = &b;
  }
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "the stop request came %.0f s ago and rank %d is still in step %lld (%s%s): it cannot end and save "
                "within the save lead of %.0f s (schedule.save_safety x the last save + schedule.min_lead_s)",
                waited, busy->rank, static_cast<long long>(busy->step + 1), busy->phase.c_str(),
                slowest > 0 ? strf(", its steps take up to %.3g s", slowest).c_str() : "", grace);
  return buf;
}

}  // namespace gtrain
