// cluster_command.cpp: `gtrain cluster`: the scheduler's facts, the hour-of-week model, quiet
// windows, quotas and their burn-down, start predictions; as text with heat maps, or --json.
#include "launcher/commands/cluster_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "launcher/base/text_util.h"
#include "launcher/cluster/cluster_samples.h"
#include "launcher/cluster/quota_burn.h"
#include "launcher/cluster/run_cluster_facts.h"
#include "launcher/cluster/start_prediction.h"
#include "launcher/cluster/week_profile.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/errors.h"
#include "runtime/core/schedule.h"

namespace gtrain {
namespace {

std::string human_wait(double s) {
  char buf[64];
  if (s < 60) return "under a minute";
  if (s < 5400)
    std::snprintf(buf, sizeof buf, "%.0f min", s / 60);
  else if (s < 2 * 86400)
    std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else
    std::snprintf(buf, sizeof buf, "%.1f days", s / 86400);
  return buf;
}

std::string when(int64_t t) {
  return text::local_time(static_cast<double>(t), "%a %Y-%m-%d %H:%M");
}

// One partition's learned rhythm: its history, profile, quiet windows.
struct PartitionModel {
  const PartitionFacts* facts = nullptr;
  std::vector<HistoryJob> jobs;
  WeekProfile profile;
  int64_t want = 1;
  int64_t wait_lo = 1, wait_hi = INT64_MAX;
  std::vector<QuietWindow> windows;
};

PartitionModel model_of(const PartitionFacts& p, const ClusterReading& r, const std::vector<ClusterSample>& samples,
                        const ClusterOptions& o, int64_t from, int64_t now) {
  PartitionModel m;
  m.facts = &p;
  m.jobs = partition_jobs(r, p.name);
  m.profile = partition_profile(r, p, from, now, samples);
  m.want = o.gpus > 0 ? o.gpus : std::max<int64_t>(1, (p.gpus * 3 + 3) / 4);
  if (o.gpus > 0) m.wait_lo = std::max<int64_t>(1, (o.gpus + 1) / 2), m.wait_hi = o.gpus * 2;
  if (profile_known(m.profile)) m.windows = quiet_windows(m.profile, m.want);
  return m;
}

// The samples gtrain's own stages kept of this cluster (cluster_samples.h).
struct KeptSamples {
  std::string path;
  std::vector<ClusterSample> samples;
  int skipped = 0;
};

KeptSamples kept_samples(const std::map<std::string, std::string>& env, const ClusterReading& r) {
  KeptSamples k;
  k.path = cluster_samples_path(env, r.scheduler, r.cluster);
  k.samples = kept_cluster_samples(env, r, &k.skipped);
  return k;
}

// The stated quota (--quota-hours): used = the user's GPU-minutes since --quota-since.
std::optional<QuotaFacts> stated(const ClusterOptions& o, const ClusterReading& r, int64_t since, int64_t now) {
  if (o.quota_hours <= 0) return std::nullopt;
  QuotaFacts q = stated_quota("stated", r.user, o.quota_hours, r.history, r.history_read, since, now, -1);
  q.source = "--quota-hours " + text::trim(std::to_string(o.quota_hours)) + " since " +
             text::local_time(static_cast<double>(since), "%Y-%m-%d") + ", used from sacct";
  return q;
}

int64_t quota_since(const ClusterOptions& o, int64_t now) {
  const int64_t t = quota_period_start(o.quota_since, "--quota-since", now);
  if (t > now) throw ConfigError("--quota-since " + o.quota_since + " is in the future");
  return t;
}

struct Prediction {
  StartPrediction history;
  std::optional<double> slurm_start;  // the scheduler's own test submission
  std::string slurm_note;
};

Prediction predict(const ClusterOptions& o, const SchedulerBackend& b, const PartitionModel& m, int64_t time_s,
                   int64_t now, const CommandRunner& run) {
  Prediction p;
  p.history = predict_start(m.jobs, o.gpus, time_s, now, m.facts, m.profile.weeks > 0 ? &m.profile : nullptr);
  const int64_t gpn = std::max<int64_t>(1, m.facts->gpus_per_node);
  const int64_t nodes = (o.gpus + gpn - 1) / gpn, per_node = (o.gpus + nodes - 1) / nodes;
  const auto argv = b.test_submit_argv(
      {b.submit_program(), "--partition=" + m.facts->name, "--time=" + b.time_limit_text(time_s), "--wrap=true"},
      static_cast<int>(nodes), static_cast<int>(per_node));
  if (!argv) {
    p.slurm_note = b.name() + " has no test submission";
    return p;
  }
  const CommandOutput r = run_merged(run, *argv);
  p.slurm_start = b.test_submit_start(r.text);
  if (!p.slurm_start) p.slurm_note = text::trim(r.text.substr(0, r.text.find('\n')));
  return p;
}

void check_options(const ClusterOptions& o) {
  if (o.weeks < 1 || o.weeks > 52)
    throw ConfigError("--weeks: expected 1 to 52 weeks of history, got " + std::to_string(o.weeks));
  if (o.gpus < 0) throw ConfigError("--gpus: expected a GPU count of 1 or more");
  if (o.predict && (o.gpus <= 0 || o.time.empty()))
    throw ConfigError("--predict needs the job's shape: --gpus N and --time T",
                      "e.g. gtrain cluster --predict --gpus 4 --time 2h");
  if (o.quota_hours < 0) throw ConfigError("--quota-hours: expected GPU-hours of 0 or more");
}

}  // namespace

namespace {

nlohmann::json quota_json(const QuotaFacts& q, const std::optional<BurnDown>& b) {
  nlohmann::json j = {{"kind", q.kind},
                      {"name", q.name},
                      {"default", q.is_default},
                      {"gpu_minutes_limit", q.limit_gpu_minutes},
                      {"gpu_minutes_used", q.used_gpu_minutes},
                      {"gpu_minutes_left", q.left_gpu_minutes()},
                      {"grp_gpus", q.grp_gpus},
                      {"grp_gpus_used", q.grp_gpus_used},
                      {"max_gpus_per_job", q.max_gpus_per_job},
                      {"max_gpus_per_user", q.max_gpus_per_user},
                      {"max_wall", q.max_wall_s.str(true)},
                      {"source", q.source}};
  if (b) {
    j["burn_gpu_minutes_per_day"] = b->burn_gpu_minutes_per_day;
    j["burn_days"] = b->days;
    j["runs_out"] = b->runs_out_unix > 0 ? nlohmann::json(b->runs_out_unix) : nlohmann::json(nullptr);
  }
  return j;
}

nlohmann::json partition_json(const PartitionModel& m) {
  const PartitionFacts& p = *m.facts;
  nlohmann::json hours = nlohmann::json::array();
  for (int h = 0; h < kHoursPerWeek; ++h) {
    const double w = m.profile.median_wait(h, m.wait_lo, m.wait_hi);
    hours.push_back({{"hour", hour_of_week_name(h)},
                     {"weeks", m.profile.free[static_cast<size_t>(h)].size()},
                     {"free_gpus_80pct_of_weeks", m.profile.free_in_share(h, 0.8)},
                     {"share_of_weeks_with_gpus_free", m.profile.share_free(h, m.want)},
                     {"median_wait_s", w < 0 ? nlohmann::json(nullptr) : nlohmann::json(w)}});
  }
  nlohmann::json windows = nlohmann::json::array();
  for (const auto& w : m.windows)
    windows.push_back({{"start", hour_of_week_name(w.first_hour)},
                       {"hours", w.hours},
                       {"free_gpus", w.free_gpus},
                       {"share", w.share},
                       {"text", w.text()}});
  return {{"name", p.name},
          {"default", p.is_default},
          {"history_covered_from", m.profile.covered_from},
          {"sampled_hours", m.profile.sampled_hours},
          {"state", p.state},
          {"nodes", p.nodes},
          {"gpus", p.gpus},
          {"gpus_per_node", p.gpus_per_node},
          {"free_gpus_now", p.free_gpus},
          {"pending_jobs", p.pending_jobs},
          {"pending_gpus", p.pending_gpus},
          {"running_jobs", p.running_jobs},
          {"max_time", p.max_time_s.str(true)},
          {"max_nodes", p.max_nodes.str()},
          {"history_jobs", m.jobs.size()},
          {"history_weeks", m.profile.weeks},
          {"quiet_for_gpus", m.want},
          {"hours", hours},
          {"quiet_windows", windows}};
}

void print_partition(const PartitionModel& m, const ClusterReading& r, std::ostream& out) {
  const PartitionFacts& p = *m.facts;
  out << "\npartition " << p.name << (p.is_default ? " (default)" : "") << ", " << p.state << ": " << p.nodes
      << " nodes, " << p.gpus << " GPUs (" << p.gpus_per_node << " a node)";
  if (p.free_gpus >= 0) out << ", " << p.free_gpus << " free now";
  if (p.pending_jobs >= 0)
    out << "; " << p.pending_jobs << " jobs pending"
        << (p.pending_gpus >= 0 ? " (" + std::to_string(p.pending_gpus) + " GPUs)" : "") << ", " << p.running_jobs
        << " running";
  out << "\n  MaxTime " << p.max_time_s.str(true) << ", MaxNodes " << p.max_nodes.str() << "   ("
      << (r.sources.empty() ? std::string("?") : r.sources.front()) << ")\n";
  if (r.history_read) {
    out << "  history: " << m.jobs.size() << " jobs over " << m.profile.weeks << " whole weeks";
    if (m.profile.covered_from > r.history_from)
      out << " (the accounting shows nothing before " << when(m.profile.covered_from) << ")";
    out << "\n";
  }
  if (m.profile.sampled_hours > 0)
    out << "  " << m.profile.sampled_hours << " hours known from gtrain's own stages' samples (the accounting "
        << (r.history_read ? "no longer shows them" : "cannot be read") << ")\n";
  if (!profile_known(m.profile)) {
    if (r.history_read) out << "  (less than a week of history: no hour-of-week profile yet)\n";
    return;
  }
  out << "  free GPUs by hour of the week (local time):\n" << free_heat_map(m.profile);
  out << "  queue waits of jobs of "
      << (m.wait_hi == INT64_MAX ? std::string("any size")
                                 : std::to_string(m.wait_lo) + "-" + std::to_string(m.wait_hi) + " GPUs")
      << " by the hour they were submitted:\n"
      << wait_heat_map(m.profile, m.wait_lo, m.wait_hi);
  out << "  quiet windows (" << m.want << " of " << p.gpus << " GPUs free in 80% of weeks):\n";
  if (m.windows.empty()) out << "    none: no hour has them free that often\n";
  for (const auto& w : m.windows) out << "    " << w.text() << "\n";
}

void print_quota(const QuotaFacts& q, const std::optional<BurnDown>& b, std::ostream& out) {
  std::vector<std::string> parts;
  if (q.limit_gpu_minutes >= 0)
    parts.push_back("GrpTRESMins gres/gpu " + std::to_string(q.limit_gpu_minutes) + " GPU-minutes, " +
                    (q.used_gpu_minutes >= 0 ? std::to_string(q.used_gpu_minutes) : std::string("?")) + " used");
  if (q.grp_gpus >= 0)
    parts.push_back("GrpTRES gres/gpu " + std::to_string(q.grp_gpus) + " (" +
                    std::to_string(std::max<int64_t>(0, q.grp_gpus_used)) + " in use)");
  if (q.max_gpus_per_job >= 0) parts.push_back("MaxTRESPerJob gres/gpu " + std::to_string(q.max_gpus_per_job));
  if (q.max_gpus_per_user >= 0) parts.push_back("MaxTRESPerUser gres/gpu " + std::to_string(q.max_gpus_per_user));
  if (q.max_wall_s.known()) parts.push_back("MaxWall " + q.max_wall_s.str(true));
  if (parts.empty()) parts.push_back("no GPU limit");
  out << "  " << q.kind << " " << q.name << (q.is_default ? " (default)" : "") << ": ";
  for (size_t i = 0; i < parts.size(); ++i) out << (i ? "; " : "") << parts[i];
  out << "\n      (" << q.source << ")\n";
  if (b) out << "    burn-down: " << b->text() << "\n";
}

// Reservations: maintenance windows and nodes kept for others, the time rules partitions do not show.
void print_reservations(const ClusterReading& r, std::ostream& out) {
  if (r.reservations.empty()) return;
  out << "\nreservations (scontrol show reservation -o):\n";
  for (const auto& x : r.reservations) {
    out << "  " << x.name << (x.maintenance ? " (maintenance: its nodes run no job)" : "") << ": " << when(x.start)
        << " to " << when(x.end) << " on " << (x.nodes.empty() ? std::string("?") : x.nodes) << " (" << x.node_count
        << " nodes)";
    if (!x.partition.empty()) out << ", partition " << x.partition;
    if (!x.maintenance && !(x.users + x.accounts).empty())
      out << ", for " << (x.users.empty() ? "accounts " + x.accounts : "users " + x.users);
    out << "\n";
  }
}

nlohmann::json reservations_json(const ClusterReading& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& x : r.reservations)
    out.push_back({{"name", x.name},
                   {"start", x.start},
                   {"end", x.end},
                   {"nodes", x.nodes},
                   {"node_count", x.node_count},
                   {"partition", x.partition},
                   {"users", x.users},
                   {"accounts", x.accounts},
                   {"flags", x.flags},
                   {"maintenance", x.maintenance}});
  return out;
}

// --json: everything the text shows, as one object.
void print_json(const ClusterOptions& o, const ClusterReading& r, const KeptSamples& kept,
                const std::vector<PartitionModel>& models, const std::vector<std::optional<BurnDown>>& burns,
                const std::optional<Prediction>& pred, int64_t from, int64_t now, double time_limit,
                std::ostream& out) {
  nlohmann::json j = {{"scheduler", r.scheduler},
                      {"user", r.user},
                      {"now", now},
                      {"history",
                       {{"read", r.history_read},
                        {"all_users", r.history_all_users},
                        {"from", from},
                        {"to", now},
                        {"jobs", r.history.size()}}},
                      {"cluster", r.cluster},
                      {"samples", {{"path", kept.path}, {"count", kept.samples.size()}, {"skipped", kept.skipped}}}};
  j["partitions"] = nlohmann::json::array();
  for (const auto& m : models) j["partitions"].push_back(partition_json(m));
  j["reservations"] = reservations_json(r);
  j["quotas"] = nlohmann::json::array();
  for (size_t i = 0; i < r.quotas.size(); ++i) j["quotas"].push_back(quota_json(r.quotas[i], burns[i]));
  if (pred) {
    const auto& h = pred->history;
    j["prediction"] = {
        {"partition", models.front().facts->name},
        {"gpus", o.gpus},
        {"time_s", time_limit},
        {"known", h.known},
        {"starts_now", h.starts_now},
        {"wait_s", h.wait_s},
        {"low_s", h.low_s},
        {"high_s", h.high_s},
        {"samples", h.samples},
        {"basis", h.basis},
        {"expected_start", h.known ? nlohmann::json(now + static_cast<int64_t>(h.wait_s)) : nlohmann::json(nullptr)},
        {"scheduler_estimate",
         pred->slurm_start ? nlohmann::json(static_cast<int64_t>(*pred->slurm_start)) : nlohmann::json(nullptr)}};
  }
  j["sources"] = r.sources;
  j["notes"] = r.notes;
  out << j.dump(2) << "\n";
}

}  // namespace

int cluster_command(const ClusterOptions& o, const std::map<std::string, std::string>& env, const CommandRunner& run,
                    std::ostream& out) {
  check_options(o);
  const double time_limit = o.time.empty() ? 0 : parse_duration(o.time, "--time", 60);
  const SchedulerBackend* b = find_scheduler_backend(o.scheduler);
  if (!b || !b->can_submit()) throw ConfigError("--scheduler " + o.scheduler + ": expected slurm or pbs");
  const int64_t now =
      o.now > 0 ? o.now
                : std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                      .count();
  ClusterQuery q;
  q.partition = o.partition;
  q.user = o.user.empty() ? cluster_user(env) : o.user;
  const int64_t from = now - int64_t{o.weeks} * 7 * 86400, since = quota_since(o, now);
  q.since_unix = o.quota_hours > 0 ? std::min(from, since) : from;
  q.until_unix = now;
  ClusterReading r = b->read_cluster(q, run);
  const KeptSamples kept = kept_samples(env, r);
  std::vector<PartitionModel> models;
  for (const auto& p : r.partitions) models.push_back(model_of(p, r, kept.samples, o, from, now));
  if (const auto s = stated(o, r, since, now)) r.quotas.push_back(*s);
  std::vector<std::optional<BurnDown>> burns;
  for (const auto& quota : r.quotas) {
    burns.push_back(quota.left_gpu_minutes() >= 0 && r.history_read
                        ? std::optional<BurnDown>(burn_down(quota, r.history, now))
                        : std::nullopt);
  }
  std::optional<Prediction> pred;
  if (o.predict && !models.empty()) pred = predict(o, *b, models.front(), static_cast<int64_t>(time_limit), now, run);

  if (o.json) {
    print_json(o, r, kept, models, burns, pred, from, now, time_limit, out);
    return 0;
  }
  out << "gtrain cluster: " << r.scheduler << ", user " << r.user << ", " << when(now) << "\n";
  if (r.history_read)
    out << "history: " << r.history.size() << " jobs since " << when(q.since_unix)
        << (r.history_all_users ? " (all users)" : " (yours only)") << "\n";
  for (const auto& m : models) print_partition(m, r, out);
  print_reservations(r, out);
  out << "\nquotas and limits you may charge:\n";
  if (r.quotas.empty()) out << "  none read\n";
  for (size_t i = 0; i < r.quotas.size(); ++i) print_quota(r.quotas[i], burns[i], out);
  if (pred) {
    const auto& h = pred->history;
    out << "\nprediction for " << o.gpus << " GPUs x " << b->time_limit_text(static_cast<int64_t>(time_limit)) << " on "
        << models.front().facts->name << ", submitted now:\n";
    if (h.starts_now)
      out << "  starts now: " << models.front().facts->free_gpus << " GPUs free and nobody waiting\n";
    else if (h.known)
      out << "  from history: starts in about " << human_wait(h.wait_s) << " ("
          << when(now + static_cast<int64_t>(h.wait_s)) << "); observed " << human_wait(h.low_s) << " to "
          << human_wait(h.high_s) << " (" << h.basis << ")\n";
    else
      out << "  from history: too few similar jobs to say\n";
    if (pred->slurm_start)
      out << "  " << b->name()
          << "'s own estimate (test submission): " << when(static_cast<int64_t>(*pred->slurm_start)) << "\n";
    else
      out << "  " << b->name() << "'s own estimate: none (" << pred->slurm_note << ")\n";
  }
  if (!kept.path.empty())
    out << "\nsamples from gtrain's own stages: " << kept.samples.size() << " in " << kept.path
        << (kept.skipped ? " (" + std::to_string(kept.skipped) + " unreadable lines skipped)" : "") << "\n";
  if (!r.notes.empty()) {
    out << "\nwhat gtrain cannot know here:\n";
    for (const auto& n : r.notes) out << "  " << n << "\n";
  }
  out << "\nread with: ";
  for (size_t i = 0; i < r.sources.size(); ++i) out << (i ? "; " : "") << r.sources[i];
  out << "\n";
  return 0;
}

}  // namespace gtrain
