// scheduler_limits.cpp: parsing scontrol / sacctmgr output into SchedulerLimits and deciding
// which limits bind.
#include "launcher/scheduler/scheduler_limits.h"

#include "launcher/base/text_util.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <sstream>

namespace gtrain {
namespace {

using text::split;
using text::trim;

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

LimitValue tres_limit(const std::string& tres) {
  const std::string t = trim(tres);
  if (t.empty()) return LimitValue::unlimited();  // sacctmgr prints an empty field for "no limit"
  const int64_t n = tres_gpu_count(t);
  return n < 0 ? LimitValue::unlimited() : LimitValue::of(n);
}

LimitValue wall_limit(const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) return LimitValue::unlimited();
  return parse_slurm_duration(t);
}

std::string get(const std::map<std::string, std::string>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? std::string() : it->second;
}

}  // namespace

std::string LimitValue::str(bool as_duration) const {
  switch (kind) {
    case kUnknown:
      return "unknown";
    case kUnlimited:
      return "unlimited";
    default:
      return as_duration ? format_duration(value) : std::to_string(value);
  }
}

std::map<std::string, std::string> parse_scontrol_record(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream is(line);
  std::string tok, last;
  while (is >> tok) {
    const size_t eq = tok.find('=');
    if (eq == std::string::npos || eq == 0) {
      if (!last.empty()) out[last] += " " + tok;
      continue;
    }
    last = tok.substr(0, eq);
    out[last] = tok.substr(eq + 1);
  }
  return out;
}

LimitValue parse_slurm_duration(const std::string& text) {
  const std::string t = upper(trim(text));
  if (t == "UNLIMITED" || t == "INFINITE") return LimitValue::unlimited();
  if (t.empty()) return LimitValue::unknown();
  int64_t days = 0;
  std::string rest = t;
  const size_t dash = t.find('-');
  if (dash != std::string::npos) {
    if (!all_digits(t.substr(0, dash))) return LimitValue::unknown();
    days = std::stoll(t.substr(0, dash));
    rest = t.substr(dash + 1);
  }
  const auto parts = split(rest, ':');
  if (parts.empty() || parts.size() > 3) return LimitValue::unknown();
  std::vector<int64_t> v;
  for (const auto& p : parts) {
    if (!all_digits(p)) return LimitValue::unknown();
    v.push_back(std::stoll(p));
  }
  int64_t secs = 0;
  if (dash != std::string::npos) {
    // D-HH, D-HH:MM, D-HH:MM:SS
    secs = days * 86400 + v[0] * 3600 + (v.size() > 1 ? v[1] * 60 : 0) + (v.size() > 2 ? v[2] : 0);
  } else if (v.size() == 1) {
    secs = v[0] * 60;  // MM
  } else if (v.size() == 2) {
    secs = v[0] * 60 + v[1];  // MM:SS
  } else {
    secs = v[0] * 3600 + v[1] * 60 + v[2];  // HH:MM:SS
  }
  return LimitValue::of(secs);
}

int64_t parse_slurm_datetime(const std::string& text) {
  const std::string t = trim(text);
  std::tm tm{};
  int n = 0;
  if (std::sscanf(t.c_str(), "%d-%d-%dT%d:%d:%d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec, &n) != 6 ||
      static_cast<size_t>(n) != t.size()) {
    return 0;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  tm.tm_isdst = -1;
  const std::time_t v = std::mktime(&tm);
  return v < 0 ? 0 : static_cast<int64_t>(v);
}

int64_t tres_gpu_count(const std::string& tres) {
  int64_t untyped = -1, typed = 0;
  bool any_typed = false;
  for (const auto& item : split(tres, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = trim(item.substr(0, eq));
    std::string val = trim(item.substr(eq + 1));
    size_t d = 0;
    while (d < val.size() && std::isdigit(static_cast<unsigned char>(val[d]))) ++d;
    if (d == 0 || d > 12) continue;
    const int64_t n = std::stoll(val.substr(0, d));
    if (key == "gres/gpu") {
      untyped = n;
    } else if (key.rfind("gres/gpu:", 0) == 0) {
      typed += n;
      any_typed = true;
    }
  }
  if (untyped >= 0) return untyped;
  return any_typed ? typed : -1;
}

namespace {

void read_job_limits(SchedulerLimits& L, const std::string& job_id, const CommandRunner& run) {
  // 1. The job itself.
  if (auto out = run({"scontrol", "show", "job", "-o", job_id})) {
    const auto rec = parse_scontrol_record(trim(*out));
    if (rec.count("JobId")) {
      L.job_time_limit_s = parse_slurm_duration(get(rec, "TimeLimit"));
      L.job_end_time_unix = parse_slurm_datetime(get(rec, "EndTime"));
      if (L.partition.empty()) L.partition = get(rec, "Partition");
      if (L.account.empty()) L.account = get(rec, "Account");
      if (L.qos.empty()) L.qos = get(rec, "QOS");
      if (L.user.empty()) {
        std::string u = get(rec, "UserId");  // "alice(1000)"
        L.user = u.substr(0, u.find('('));
      }
      std::string tres = get(rec, "AllocTRES");
      if (tres.empty()) tres = get(rec, "TRES");
      L.job_gpus = tres_gpu_count(tres);
      // TresPerNode=gres/gpu:a100:4 (or gres:gpu:a100:4 on older releases)
      std::string tpn = get(rec, "TresPerNode");
      for (const char* p : {"gres/gpu:", "gres:gpu:"}) {
        if (tpn.rfind(p, 0) == 0) {
          auto f = split(tpn.substr(std::string(p).size()), ':');
          if (f.size() >= 2 && !all_digits(f[0])) L.job_gpu_type = f[0];
        }
      }
    } else {
      L.notes.push_back("scontrol show job " + job_id + ": no JobId in the output");
    }
  } else {
    L.notes.push_back("scontrol show job " + job_id + " gave nothing (scontrol missing or job not visible)");
  }
}

void read_partition_limits(SchedulerLimits& L, const CommandRunner& run) {
  // 2. The partition.
  if (!L.partition.empty()) {
    if (auto out = run({"scontrol", "show", "partition", "-o", L.partition})) {
      const auto rec = parse_scontrol_record(trim(*out));
      if (rec.count("PartitionName")) {
        L.partition_max_time_s = parse_slurm_duration(get(rec, "MaxTime"));
        const std::string mn = upper(get(rec, "MaxNodes"));
        if (mn == "UNLIMITED")
          L.partition_max_nodes = LimitValue::unlimited();
        else if (all_digits(mn))
          L.partition_max_nodes = LimitValue::of(std::stoll(mn));
        const std::string pq = get(rec, "QoS");
        if (!pq.empty() && pq != "N/A") L.partition_qos = pq;
      }
    } else {
      L.notes.push_back("scontrol show partition " + L.partition + " gave nothing: partition limits unknown");
    }
  } else {
    L.notes.push_back("partition unknown: partition limits unknown");
  }
}

void read_qos_limits(SchedulerLimits& L, const CommandRunner& run) {
  // 3. QOS (the job's and the partition's).
  auto read_qos = [&](const std::string& name, LimitValue* wall, LimitValue* per_job, LimitValue* per_user,
                      LimitValue* grp) {
    auto out = run({"sacctmgr", "-P", "-n", "show", "qos", "where", "name=" + name,
                    "format=Name,MaxWall,MaxTRESPerJob,MaxTRESPerUser,GrpTRES"});
    if (!out) {
      L.notes.push_back("sacctmgr show qos " + name +
                        " gave nothing (sacctmgr missing or not permitted): QOS limits unknown");
      return;
    }
    for (const auto& line : split(*out, '\n')) {
      auto f = split(trim(line), '|');
      if (f.size() < 5 || f[0] != name) continue;
      if (wall) *wall = wall_limit(f[1]);
      *per_job = tres_limit(f[2]);
      *per_user = tres_limit(f[3]);
      if (grp) *grp = tres_limit(f[4]);
      return;
    }
    L.notes.push_back("sacctmgr show qos " + name + ": QOS not listed: QOS limits unknown");
  };
  if (!L.qos.empty()) {
    read_qos(L.qos, &L.qos_max_wall_s, &L.qos_max_gpus_per_job, &L.qos_max_gpus_per_user, &L.qos_grp_gpus);
  } else {
    L.notes.push_back("QOS unknown: QOS limits unknown");
  }
  if (!L.partition_qos.empty()) {
    read_qos(L.partition_qos, nullptr, &L.partition_qos_max_gpus_per_job, &L.partition_qos_max_gpus_per_user, nullptr);
  }
}

void read_assoc_limits(SchedulerLimits& L, const CommandRunner& run) {
  // 4. Associations: the user's row in the account (for this partition, or for all partitions)
  //    and the account's own row.
  if (!L.account.empty()) {
    auto out = run({"sacctmgr", "-P", "-n", "show", "assoc", "where", "account=" + L.account,
                    "format=Account,User,Partition,GrpTRES,MaxTRES,MaxWall"});
    if (out) {
      bool user_row = false, user_row_exact = false;
      for (const auto& line : split(*out, '\n')) {
        auto f = split(trim(line), '|');
        if (f.size() < 6 || f[0] != L.account) continue;
        const std::string& u = f[1];
        const std::string& part = f[2];
        if (u.empty()) {
          if (part.empty()) L.account_grp_gpus = tres_limit(f[3]);
        } else if (u == L.user && (part.empty() || part == L.partition)) {
          const bool exact = !part.empty();
          if (user_row_exact && !exact) continue;  // a partition-specific row wins
          user_row = true;
          user_row_exact = exact;
          L.assoc_grp_gpus = tres_limit(f[3]);
          L.assoc_max_gpus_per_job = tres_limit(f[4]);
          L.assoc_max_wall_s = wall_limit(f[5]);
        }
      }
      if (!user_row) L.notes.push_back("no association of user " + L.user + " in account " + L.account + " listed");
    } else {
      L.notes.push_back(
          "sacctmgr show assoc gave nothing (sacctmgr missing or not permitted): association limits unknown");
    }
  } else {
    L.notes.push_back("account unknown: association limits unknown");
  }
}

}  // namespace

SchedulerLimits read_slurm_limits(const std::string& job_id, const std::string& user, const std::string& account,
                                  const std::string& partition, const std::string& qos, const CommandRunner& run) {
  SchedulerLimits L;
  L.user = user;
  L.account = account;
  L.partition = partition;
  L.qos = qos;
  read_job_limits(L, job_id, run);
  read_partition_limits(L, run);
  read_qos_limits(L, run);
  read_assoc_limits(L, run);
  return L;
}

std::vector<LimitLine> SchedulerLimits::lines(int64_t granted_gpus, int64_t granted_nodes) const {
  std::vector<LimitLine> out;
  auto gpu_line = [&](const std::string& scope, const std::string& name, const LimitValue& v, const char* per) {
    LimitLine l{scope, name, v.str(false), false, ""};
    if (v.known() && granted_gpus >= 0 && v.value <= granted_gpus) {
      l.binds = true;
      l.note = "caps the GPUs " + std::string(per) + " at " + std::to_string(v.value) + "; " +
               std::to_string(granted_gpus) + " granted";
    }
    out.push_back(l);
  };
  const std::string qscope = "QOS " + (qos.empty() ? std::string("?") : qos);
  const std::string ascope =
      "association " + (account.empty() ? std::string("?") : account) + "/" + (user.empty() ? std::string("?") : user);

  // Time: the job's limit is what ends the run; a partition or QOS maximum binds when the job
  // already asked for it.
  {
    LimitLine l{"job", "TimeLimit", job_time_limit_s.str(true), job_time_limit_s.known(), ""};
    if (l.binds) l.note = "the job ends after this";
    out.push_back(l);
  }
  auto time_line = [&](const std::string& scope, const std::string& name, const LimitValue& v) {
    LimitLine l{scope, name, v.str(true), false, ""};
    if (v.known() && job_time_limit_s.known() && v.value <= job_time_limit_s.value) {
      l.binds = true;
      l.note = "the job already asks for this maximum; it cannot run longer";
    }
    out.push_back(l);
  };
  time_line("partition " + (partition.empty() ? std::string("?") : partition), "MaxTime", partition_max_time_s);
  {
    LimitLine l{"partition " + (partition.empty() ? std::string("?") : partition), "MaxNodes",
                partition_max_nodes.str(false), false, ""};
    if (partition_max_nodes.known() && granted_nodes > 0 && partition_max_nodes.value <= granted_nodes) {
      l.binds = true;
      l.note = "caps the nodes per job at " + std::to_string(partition_max_nodes.value);
    }
    out.push_back(l);
  }
  time_line(qscope, "MaxWall", qos_max_wall_s);
  gpu_line(qscope, "MaxTRESPerJob gres/gpu", qos_max_gpus_per_job, "per job");
  gpu_line(qscope, "MaxTRESPerUser gres/gpu", qos_max_gpus_per_user, "of all your running jobs");
  gpu_line(qscope, "GrpTRES gres/gpu", qos_grp_gpus, "of everyone in this QOS");
  if (!partition_qos.empty()) {
    gpu_line("partition QOS " + partition_qos, "MaxTRESPerJob gres/gpu", partition_qos_max_gpus_per_job, "per job");
    gpu_line("partition QOS " + partition_qos, "MaxTRESPerUser gres/gpu", partition_qos_max_gpus_per_user,
             "of all your running jobs");
  }
  gpu_line(ascope, "MaxTRES gres/gpu", assoc_max_gpus_per_job, "per job");
  gpu_line(ascope, "GrpTRES gres/gpu", assoc_grp_gpus, "of all your running jobs in this account");
  time_line(ascope, "MaxWall", assoc_max_wall_s);
  gpu_line("account " + (account.empty() ? std::string("?") : account), "GrpTRES gres/gpu", account_grp_gpus,
           "of everyone in this account");
  return out;
}

}  // namespace gtrain
