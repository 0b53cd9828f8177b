// submit_shaping.cpp: --when quiet, --time auto, --account/--qos auto and the quota warning.
#include "launcher/commands/submit_shaping.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

#include "launcher/base/text_util.h"
#include "launcher/chain/stage_sizing.h"
#include "launcher/cluster/cluster_samples.h"
#include "launcher/cluster/quota_burn.h"
#include "launcher/cluster/run_cluster_facts.h"
#include "launcher/commands/plan_command.h"
#include "launcher/launch/run_launch.h"
#include "runtime/core/errors.h"
#include "runtime/core/schedule.h"

namespace gtrain {

namespace fs = std::filesystem;

namespace {

std::string when(double t) {
  return text::local_time(t, "%a %Y-%m-%d %H:%M");
}

std::string hours_text(double gpu_minutes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", gpu_minutes / 60);
  return buf;
}

// The share of weeks the profile had `gpus` free at the hour holding `t`, as a percentage.
int percent_free(const WeekProfile& p, double t, int64_t gpus) {
  return static_cast<int>(std::floor(p.share_free(hour_of_week(static_cast<int64_t>(t)), gpus) * 100 + 1e-9));
}

}  // namespace

SubmitCluster read_submit_cluster(const SubmitOptions& o, const SchedulerBackend& b, const CommandRunner& run,
                                  double now, bool history, bool partitions) {
  SubmitCluster c;
  ClusterQuery q;
  q.partition = o.partition;
  const auto env = process_environment();
  q.user = cluster_user(env);
  q.until_unix = static_cast<int64_t>(now);
  q.since_unix = q.until_unix - 4 * 7 * 86400;
  q.read_history = history;
  q.read_partitions = partitions;
  c.reading = b.read_cluster(q, run);
  if (!c.reading.partitions.empty()) c.partition_index = 0;
  // The hours the accounting no longer shows come from gtrain's own stages' samples.
  if (c.partition() && history)
    c.profile =
        partition_profile(c.reading, *c.partition(), q.since_unix, q.until_unix, kept_cluster_samples(env, c.reading));
  return c;
}

double parse_deadline(const std::string& text, double now) {
  for (const char* f : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"}) {
    if (const auto t = text::parse_local_time(text, f)) {
      if (*t <= now) throw ConfigError("--deadline " + text + " has passed");
      return *t;
    }
  }
  try {
    return now + parse_duration(text, "--deadline");
  } catch (const ConfigError&) {
    throw ConfigError(
        "--deadline: expected a local date-time (2026-12-10T08:00) or a duration from now (3d, 36h), "
        "got '" +
        text + "'");
  }
}

void delay_to_quiet(std::vector<StagePlan>& plans, const SubmitCluster& c, double limit_s, double deadline,
                    std::ostream& out) {
  if (!c.partition() || c.profile.weeks == 0) {
    std::string why = c.reading.notes.empty() ? "less than a week of job history" : c.reading.notes.front();
    for (const auto& n : c.reading.notes)
      if (n.find("history") != std::string::npos) why = n;
    out << "  --when quiet: no quiet hours known (" << why << "): every stage starts as soon as it can\n";
    return;
  }
  const WeekProfile& p = c.profile;
  double prev_end = plans.front().start_unix;
  for (size_t i = 0; i < plans.size(); ++i) {
    StagePlan& s = plans[i];
    const double t = std::max(prev_end, s.begin_unix > 0 ? s.begin_unix : s.start_unix);
    s.start_unix = t, s.end_unix = t + limit_s;
    prev_end = s.end_unix;
    const std::string label = "  stage " + std::to_string(i + 1) + ": ";
    if (p.share_free(hour_of_week(static_cast<int64_t>(t)), s.gpus) >= 0.8 - 1e-9) continue;  // quiet enough
    double quiet = 0;
    const double first_hour = t - std::fmod(t, 3600.0);
    for (int h = 1; h <= kHoursPerWeek && quiet == 0; ++h) {
      const double at = first_hour + h * 3600.0;
      if (p.share_free(hour_of_week(static_cast<int64_t>(at)), s.gpus) >= 0.8 - 1e-9) quiet = at;
    }
    if (quiet == 0) {
      out << label << "no hour of the week had " << s.gpus << " of " << p.total_gpus
          << " GPUs free in 80% of weeks: it starts as soon as it can\n";
      continue;
    }
    const double chain_end = quiet + limit_s * static_cast<double>(plans.size() - i);
    if (deadline > 0 && chain_end > deadline) {
      out << label << "not delayed: waiting for " << when(quiet) << " (" << s.gpus
          << " GPUs free then in 80% of weeks) would end the chain after the deadline " << when(deadline) << "\n";
      continue;
    }
    s.begin_unix = s.start_unix = quiet;
    s.end_unix = quiet + limit_s;
    prev_end = s.end_unix;
    s.shaped = "begin " + when(quiet) + ": " + std::to_string(s.gpus) + " of " + std::to_string(p.total_gpus) +
               " GPUs were free then in " + std::to_string(percent_free(p, quiet, s.gpus)) + "% of weeks, at " +
               when(t) + " in " + std::to_string(percent_free(p, t, s.gpus)) + "%";
    out << label << s.shaped << "\n";
  }
}

BackfillShape backfill_shape(const SubmitOptions& o, const SchedulerBackend& b, const SubmitCluster& c,
                             const std::vector<int>& gpu_counts, double now, const CommandRunner& run, int max_probes) {
  BackfillShape best;
  std::vector<double> times = {900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800};
  double most = 0;
  if (c.partition() && c.partition()->max_time_s.known()) most = static_cast<double>(c.partition()->max_time_s.value);
  for (const auto& q : c.reading.quotas)
    if (q.max_wall_s.known() && (o.qos.empty() || o.qos == "auto" || q.kind != "QOS" || q.name == o.qos))
      most =
          most > 0 ? std::min(most, static_cast<double>(q.max_wall_s.value)) : static_cast<double>(q.max_wall_s.value);
  if (most > 0)
    times.erase(std::remove_if(times.begin(), times.end(), [&](double t) { return t > most; }), times.end());
  std::vector<int> counts = gpu_counts;
  std::sort(counts.rbegin(), counts.rend());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  const int gpn =
      c.partition() && c.partition()->gpus_per_node > 0 ? static_cast<int>(c.partition()->gpus_per_node) : 0;
  int probes = 0;
  auto probe = [&](int g, double t, int* nodes) -> std::optional<double> {
    *nodes = gpn > 0 ? (g + gpn - 1) / gpn : 1;
    std::vector<std::string> argv = {b.submit_program(), "--time=" + b.time_limit_text(static_cast<int64_t>(t))};
    if (!o.partition.empty()) argv.push_back("--partition=" + o.partition);
    if (!o.account.empty() && o.account != "auto") argv.push_back("--account=" + o.account);
    if (!o.qos.empty() && o.qos != "auto") argv.push_back("--qos=" + o.qos);
    argv.push_back("--wrap=true");
    const auto test = b.test_submit_argv(argv, *nodes, (g + *nodes - 1) / *nodes);
    if (!test) return std::nullopt;
    ++probes;
    const CommandOutput r = run_merged(run, *test);
    const auto start = r.rc == 0 ? b.test_submit_start(r.text) : std::nullopt;
    best.table += "  " + std::to_string(g) + " GPU(s) x " + b.time_limit_text(static_cast<int64_t>(t)) + ": " +
                  (!start               ? "refused (" + text::trim(r.text.substr(0, r.text.find('\n'))) + ")"
                   : *start <= now + 60 ? std::string("starts now")
                                        : "starts " + when(*start)) +
                  "\n";
    return start;
  };
  if (!b.test_submit_argv({b.submit_program(), "x"}, 1, 1)) return best;
  for (int g : counts) {
    if (gpn > 0 && g > gpn && g % gpn != 0) continue;  // whole nodes past one node
    // The longest time that starts now: starts are later for longer jobs, so a binary search.
    int lo = 0, hi = static_cast<int>(times.size()) - 1, found = -1, nodes = 1;
    double found_start = 0;
    while (lo <= hi && probes < max_probes) {
      const int mid = (lo + hi) / 2;
      const auto start = probe(g, times[static_cast<size_t>(mid)], &nodes);
      if (start && *start <= now + 60) {
        found = mid, found_start = *start, lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    if (found >= 0 &&
        static_cast<double>(g) * times[static_cast<size_t>(found)] > static_cast<double>(best.gpus) * best.time_s) {
      best.gpus = g, best.nodes = gpn > 0 ? (g + gpn - 1) / gpn : 1, best.time_s = times[static_cast<size_t>(found)];
      best.start = found_start;
    }
    if (probes >= max_probes) break;
  }
  best.probes = probes;
  if (best.gpus == 0 && c.partition()) {
    BackfillShape hole = queue_hole(*c.partition(), counts, most, now);
    if (hole.gpus > 0) {
      hole.probes = best.probes;
      hole.table = best.table + hole.table;
      return hole;
    }
    best.table += hole.table;
  }
  return best;
}

BackfillShape queue_hole(const PartitionFacts& p, const std::vector<int>& gpu_counts, double most_s, double now) {
  BackfillShape hole;
  hole.from_queue = true;
  if (p.next_planned_start <= 0) {
    hole.table = "  the queue: " +
                 std::string(p.pending_jobs > 0 ? "no start planned yet for the pending jobs"
                                                : "nothing pending, and no test submission starts now") +
                 ": no hole to size\n";
    return hole;
  }
  if (most_s <= 0) most_s = 172800;  // the probes' longest
  double span = static_cast<double>(p.next_planned_start) - now - 120;
  span = std::floor(span / 60) * 60;
  span = std::min(span, most_s);
  const int64_t gpn = p.gpus_per_node > 0 ? p.gpus_per_node : 0;
  const int64_t widest = p.node_free.empty() ? 0 : *std::max_element(p.node_free.begin(), p.node_free.end());
  const int64_t whole = std::count_if(p.node_free.begin(), p.node_free.end(), [&](int64_t f) { return f == gpn; });
  std::string line = "  the queue: " + std::to_string(widest) + " GPU(s) free on one node now, the next pending job " +
                     "planned to start " + when(static_cast<double>(p.next_planned_start)) + " (squeue --start)";
  if (span < 900) {
    hole.table = line + ": under 15 minutes before it\n";
    return hole;
  }
  std::vector<int> counts = gpu_counts;
  std::sort(counts.rbegin(), counts.rend());
  for (int g : counts) {
    const bool fits = g <= widest || (gpn > 0 && g % gpn == 0 && g / gpn <= whole);
    if (!fits) continue;
    hole.gpus = g, hole.nodes = gpn > 0 && g > gpn ? static_cast<int>(g / gpn) : 1, hole.time_s = span;
    hole.start = now;
    hole.table = line + ": backfill fits " + std::to_string(g) + " GPU(s) for the time before it\n";
    return hole;
  }
  hole.table = line + ": none of the sizes asked for is free\n";
  return hole;
}

namespace {

// The quotas charged by a job of `account` and `qos` ("" = the user's defaults): the account's row,
// the user's association in it, the QOS.
std::vector<const QuotaFacts*> charged(const SubmitCluster& c, std::string account, std::string qos) {
  for (const auto& q : c.reading.quotas) {
    if (account.empty() && q.kind == "account" && q.is_default) account = q.name;
    if (qos.empty() && q.kind == "QOS" && q.is_default) qos = q.name;
  }
  std::vector<const QuotaFacts*> out;
  for (const auto& q : c.reading.quotas) {
    const std::string acct = q.name.substr(0, q.name.find_first_of("/ "));
    if ((q.kind == "account" || q.kind == "association") && acct == account) out.push_back(&q);
    if (q.kind == "QOS" && q.name == qos) out.push_back(&q);
  }
  return out;
}

// GPU-minutes left for a job of `account` and `qos` after `spent` (per quota) is taken: the least of
// the quotas it charges (-1 = no GPU-minute limit).
double minutes_left(const SubmitCluster& c, const std::string& account, const std::string& qos,
                    const std::map<const QuotaFacts*, double>& spent, std::string* which) {
  double left = -1;
  for (const QuotaFacts* q : charged(c, account, qos)) {
    if (q->left_gpu_minutes() < 0) continue;
    const double l = static_cast<double>(q->left_gpu_minutes()) - (spent.count(q) ? spent.at(q) : 0.0);
    if (left < 0 || l < left) left = l, *which = q->kind + " " + q->name;
  }
  return left;
}

struct Payer {
  std::string account, qos;
  std::string name() const { return account + (qos.empty() ? "" : "/" + qos); }
  bool is_default = false;
  double start = 0;     // the first stage's test-submission start (0: refused or not probed)
  std::string refused;  // why the scheduler would not take it
};

}  // namespace

void choose_accounts(const SubmitOptions& o, const SchedulerBackend& b, const SubmitCluster& c,
                     std::vector<StagePlan>& plans, double limit_s, double now, const CommandRunner& run,
                     std::ostream& out) {
  std::vector<std::string> accounts, qoses;
  std::string default_account, default_qos;
  for (const auto& q : c.reading.quotas) {
    const std::string acct = q.name.substr(0, q.name.find_first_of("/ "));
    if ((q.kind == "account" || q.kind == "association") &&
        std::find(accounts.begin(), accounts.end(), acct) == accounts.end())
      accounts.push_back(acct);
    if (q.kind == "QOS") qoses.push_back(q.name);
    if (q.is_default) (q.kind == "QOS" ? default_qos : default_account) = q.name;
  }
  if (o.account != "auto") accounts = {o.account};
  if (o.qos != "auto") qoses = {o.qos};
  if (accounts.empty() || qoses.empty())
    throw ConfigError(std::string(o.account == "auto" ? "--account" : "--qos") +
                          " auto: the scheduler lists none you may charge (" +
                          (c.reading.notes.empty() ? "sacctmgr shows no association" : c.reading.notes.front()) + ")",
                      "name one, or ask your admin which you may use");
  // Every pair, the first stage test-submitted with it.
  std::vector<Payer> payers;
  for (const auto& a : accounts) {
    for (const auto& q : qoses) {
      Payer p{a, q, (a.empty() || a == default_account) && (q.empty() || q == default_qos), 0, ""};
      const StagePlan& s = plans.front();
      std::vector<std::string> argv = {b.submit_program(),
                                       "--time=" + b.time_limit_text(static_cast<int64_t>(limit_s))};
      if (!o.partition.empty()) argv.push_back("--partition=" + o.partition);
      if (!a.empty()) argv.push_back("--account=" + a);
      if (!q.empty()) argv.push_back("--qos=" + q);
      argv.push_back("--wrap=true");
      if (const auto test = b.test_submit_argv(argv, s.nodes, std::max(1, s.gpus / s.nodes))) {
        const CommandOutput r = run_merged(run, *test);
        if (const auto start = r.rc == 0 ? b.test_submit_start(r.text) : std::nullopt)
          p.start = std::max(now, *start);
        else
          p.refused = text::trim(r.text.substr(0, r.text.find('\n')));
      }
      payers.push_back(p);
    }
  }
  std::stable_sort(payers.begin(), payers.end(), [](const Payer& x, const Payer& y) {
    if (x.refused.empty() != y.refused.empty()) return x.refused.empty();
    if (x.start != y.start) return x.start < y.start;
    return x.is_default > y.is_default;
  });
  std::map<const QuotaFacts*, double> spent;
  for (size_t i = 0; i < plans.size(); ++i) {
    StagePlan& s = plans[i];
    const double need = static_cast<double>(s.gpus) * limit_s / 60;
    std::string why_not;
    const Payer* pick = nullptr;
    for (const auto& p : payers) {
      std::string which;
      const double left = minutes_left(c, p.account, p.qos, spent, &which);
      if (!p.refused.empty()) {
        why_not += "; " + p.name() + " refused (" + p.refused + ")";
      } else if (left >= 0 && left < need) {
        why_not += "; " + p.name() + ": " + which + " has " + hours_text(left) + " GPU-hours left";
      } else {
        pick = &p;
        break;
      }
    }
    if (pick && i == 0) {
      // Stage 1: why each other payer was not taken.
      for (const auto& p : payers) {
        if (&p == pick || why_not.find("; " + p.name() + ":") != std::string::npos ||
            why_not.find("; " + p.name() + " refused") != std::string::npos)
          continue;
        std::string which;
        const double left = minutes_left(c, p.account, p.qos, spent, &which);
        if (!p.refused.empty())
          why_not += "; " + p.name() + " refused (" + p.refused + ")";
        else if (left >= 0 && left < need)
          why_not += "; " + p.name() + ": " + which + " has " + hours_text(left) + " GPU-hours left";
        else
          why_not += "; " + p.name() + (p.start <= now + 60 ? ": starts now too" : ": starts " + when(p.start));
      }
    }
    if (!pick)
      throw ConfigError("--account/--qos auto: no account and QOS you may charge can pay for stage " +
                            std::to_string(i + 1) + " (" + hours_text(need) + " GPU-hours)" + why_not,
                        "gtrain cluster shows what each has left; ask your group to lend quota, or shorten --time");
    s.account = o.account == "auto" ? pick->account : "";
    s.qos = o.qos == "auto" ? pick->qos : "";
    for (const QuotaFacts* q : charged(c, pick->account, pick->qos)) spent[q] += need;
    const std::string payer = "account " + pick->account + (pick->qos.empty() ? "" : ", QOS " + pick->qos);
    const std::string start = i > 0 ? "" : pick->start <= now + 60 ? "starts now" : "starts " + when(pick->start);
    s.shaped +=
        std::string(s.shaped.empty() ? "" : "; ") + "paid by " + payer + (start.empty() ? "" : " (" + start + ")");
    out << "  stage " << i + 1 << ": " << payer << (start.empty() ? "" : ", " + start)
        << (why_not.empty() ? "" : " (" + why_not.substr(2) + ")") << "\n";
  }
}

std::vector<std::string> quota_warnings(const SubmitCluster& c, const std::vector<StagePlan>& plans, int64_t steps_left,
                                        int64_t step_now, const std::function<double(int)>& gpu_minutes_per_step,
                                        const std::optional<QuotaFacts>& stated) {
  std::vector<std::string> out;
  if (plans.empty() || steps_left <= 0) return out;
  const int gpus = plans.front().gpus;
  const double per_step = gpu_minutes_per_step(gpus);
  if (per_step <= 0) return out;
  const double need = per_step * static_cast<double>(steps_left);
  std::vector<const QuotaFacts*> quotas = charged(c, plans.front().account, plans.front().qos);
  if (stated) quotas.push_back(&*stated);
  for (const QuotaFacts* q : quotas) {
    const double left = static_cast<double>(q->left_gpu_minutes());
    if (q->left_gpu_minutes() < 0 || need <= left) continue;
    const auto reach = step_now + static_cast<int64_t>(std::floor(left / per_step));
    char buf[384];
    std::snprintf(buf, sizeof buf,
                  "%s %s has %s GPU-hours left; finishing the run needs about %s (%lld steps on %d GPUs): the "
                  "chain would stop near step %lld of %lld",
                  q->kind.c_str(), q->name.c_str(), hours_text(left).c_str(), hours_text(need).c_str(),
                  static_cast<long long>(steps_left), gpus, static_cast<long long>(reach),
                  static_cast<long long>(step_now + steps_left));
    out.push_back(buf);
  }
  return out;
}

void check_shaping_options(const SubmitOptions& o, const SchedulerBackend& b, bool has_windows) {
  if (o.when != "now" && o.when != "quiet") throw ConfigError("--when: expected now or quiet, got '" + o.when + "'");
  if (!o.deadline.empty() && o.when != "quiet")
    throw ConfigError("--deadline bounds --when quiet's delays: give --when quiet too");
  if (o.when == "quiet" && has_windows)
    throw ConfigError("--when quiet and the config's [[schedule.window]] both set the stages' begin times",
                      "use one: the quota windows are your site's rules, quiet hours a prediction");
  if (o.time == "auto" && !b.test_submit_argv({b.submit_program(), "x"}, 1, 1))
    throw ConfigError("--time auto probes the scheduler's test submission, which " + b.name() + " has not",
                      "give --time");
  if (b.kind() != SchedulerKind::slurm) {
    for (const auto& [flag, value] : {std::pair{"--account", o.account}, {"--qos", o.qos}})
      if (value == "auto")
        throw ConfigError(std::string(flag) + " auto reads accounts, QOS and their quotas from Slurm's accounting; " +
                              b.name() + " keeps none gtrain can read",
                          std::string("name one with ") + flag);
  }
}

SubmitOptions resolve_time_auto(const SubmitOptions& o, const SchedulerBackend& b, const CommandRunner& run, double now,
                                std::ostream& out) {
  if (o.time != "auto") return o;
  const SubmitCluster c = read_submit_cluster(o, b, run, now, false);
  const int most = c.partition() && c.partition()->gpus > 0 ? static_cast<int>(c.partition()->gpus) : 8;
  std::vector<int> counts;
  if (o.gpus.empty()) {
    counts = {1};
  } else if (o.gpus == "auto" || o.gpus.find_first_of("-,") != std::string::npos) {
    counts = parse_gpu_candidates(o.gpus, most);
  } else {
    counts = {std::max(1, std::atoi(o.gpus.c_str()))};
  }
  const BackfillShape shape = backfill_shape(o, b, c, counts, now, run);
  out << "gtrain submit: --time auto: " << shape.probes << " test submission(s):\n" << shape.table;
  if (shape.gpus == 0)
    throw ConfigError("--time auto: no size of --gpus " + (o.gpus.empty() ? std::string("1") : o.gpus) +
                          " starts now at any time limit from 15 minutes (the probes above)",
                      "give --time (the stage then waits in the queue), or fewer GPUs");
  SubmitOptions r = o;
  r.time = b.time_limit_text(static_cast<int64_t>(shape.time_s));
  r.gpus = std::to_string(shape.gpus);
  if (shape.nodes > 1 && (o.nodes.empty() || o.nodes == "1")) r.nodes = std::to_string(shape.nodes);
  out << "  chosen: " << shape.gpus << " GPU(s) x " << r.time
      << (shape.from_queue ? ", the largest that backfill starts now before the pending jobs' planned starts ("
                           : ", the largest that starts now (")
      << hours_text(shape.gpus * shape.time_s / 60) << " GPU-hours); each stage gets that shape\n";
  return r;
}

void shape_stages(const SubmitOptions& o, const JobConfig& cfg, const SchedulerBackend& b,
                  std::vector<StagePlan>& plans, double limit_s, const std::string& run_dir, const CommandRunner& run,
                  double now, std::ostream& out) {
  const bool stated = cfg.cluster.gpu_hours_quota > 0;
  const bool accounts = o.account == "auto" || o.qos == "auto";
  if (plans.empty() || !b.can_submit()) return;
  if (b.kind() != SchedulerKind::slurm && !stated && o.when != "quiet") return;  // nothing to read there
  // Partitions and the queue only for what uses them (quiet hours, test submissions). The quota
  // warning alone is best effort: a scheduler that cannot be read that way just gives none.
  SubmitCluster c;
  try {
    c = read_submit_cluster(o, b, run, now, o.when == "quiet" || stated, true);
  } catch (const ConfigError&) {
    if (o.when == "quiet" || accounts || stated) throw;
    return;
  }
  if (o.when == "quiet") {
    out << "gtrain submit: --when quiet" << (o.deadline.empty() ? "" : ", --deadline " + o.deadline) << ":\n";
    delay_to_quiet(plans, c, limit_s, o.deadline.empty() ? 0 : parse_deadline(o.deadline, now), out);
  }
  if (accounts) {
    out << "gtrain submit: " << (o.account == "auto" ? "--account auto" : "")
        << (o.account == "auto" && o.qos == "auto" ? ", " : "") << (o.qos == "auto" ? "--qos auto" : "") << ":\n";
    choose_accounts(o, b, c, plans, limit_s, now, run, out);
  }
  std::optional<QuotaFacts> stated_quota_facts;
  if (stated) {
    const int64_t t = static_cast<int64_t>(now);
    stated_quota_facts = stated_quota("stated quota of", c.reading.user, cfg.cluster.gpu_hours_quota, c.reading.history,
                                      c.reading.history_read,
                                      quota_period_start(cfg.cluster.quota_since, "cluster.quota_since", t), t, 0);
  }
  const StageHistory hist = read_stage_history(run_dir, now);
  const JobDescription job = describe_job(cfg);
  const int64_t total = cfg.train.steps > 0 ? cfg.train.steps : job.total_steps;
  JobConfig layout = cfg;
  if (layout.parallel.memory_gb <= 0) layout.parallel.memory_gb = 1e9;
  const auto per_step = [&](int g) {
    try {
      return plan_run(layout, job.stats, g, std::max(1, g / plans.front().nodes)).est_step_seconds * hist.factor * g /
             60;
    } catch (const ConfigError&) {
      return 0.0;
    }
  };
  for (const auto& w :
       quota_warnings(c, plans, std::max<int64_t>(0, total - hist.done), hist.done, per_step, stated_quota_facts))
    out << "gtrain submit: warning: " << w << "\n";
  // What was read goes in the run directory for gtrain report's resource request.
  ClusterReading kept = c.reading;
  if (stated_quota_facts) kept.quotas.push_back(*stated_quota_facts);
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  write_cluster_facts(run_dir, cluster_facts_of(kept, c.partition(), c.profile, plans.front().gpus,
                                                static_cast<int64_t>(now), "gtrain submit"));
}

}  // namespace gtrain
