// slurm_cluster.cpp: Slurm's answers for `gtrain cluster` (scontrol, squeue, sacct, sacctmgr) and
// their parsers (cluster_reading.h).
#include <algorithm>
#include <sstream>

#include "launcher/base/text_util.h"
#include "launcher/scheduler/cluster_reading.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!text::trim(line).empty()) out.push_back(line);
  }
  return out;
}

int64_t to_int(const std::string& s, int64_t otherwise = -1) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return otherwise;
  return std::stoll(s);
}

// A "Key=Value" token's value in an assoc_mgr record's text ("" when absent).
std::string record_value(const std::string& record, const std::string& key) {
  for (size_t at = record.find(key + "="); at != std::string::npos; at = record.find(key + "=", at + 1)) {
    if (at > 0 && !std::isspace(static_cast<unsigned char>(record[at - 1]))) continue;
    const size_t from = at + key.size() + 1;
    size_t to = from;
    while (to < record.size() && !std::isspace(static_cast<unsigned char>(record[to]))) ++to;
    return record.substr(from, to - from);
  }
  return "";
}

}  // namespace

std::vector<HistoryJob> parse_sacct_jobs(const std::string& text) {
  std::vector<HistoryJob> out;
  const auto lines = lines_of(text);
  if (lines.empty()) return out;
  const auto header = text::split(lines[0], '|');
  auto col = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
  };
  const int id = col("JobID"), user = col("User"), account = col("Account"), part = col("Partition"), qos = col("QOS"),
            submit = col("Submit"), start = col("Start"), end = col("End"), alloc = col("AllocTRES"),
            req = col("ReqTRES"), limit = col("Timelimit"), state = col("State");
  if (id < 0 || submit < 0 || start < 0) return out;
  for (size_t i = 1; i < lines.size(); ++i) {
    const auto f = text::split(lines[i], '|');
    auto at = [&](int c) { return c >= 0 && c < static_cast<int>(f.size()) ? f[static_cast<size_t>(c)] : ""; };
    HistoryJob j;
    j.id = at(id);
    if (j.id.empty() || j.id.find('.') != std::string::npos) continue;  // a step
    j.user = at(user), j.account = at(account), j.partition = at(part), j.qos = at(qos);
    j.state = text::split(at(state), ' ')[0];  // "CANCELLED by 0"
    j.submit = parse_slurm_datetime(at(submit));
    j.start = parse_slurm_datetime(at(start));
    j.end = parse_slurm_datetime(at(end));
    if (j.start > 0 && j.end > 0 && j.end < j.start) j.end = j.start;
    int64_t g = tres_gpu_count(at(alloc));
    if (g < 0) g = tres_gpu_count(at(req));
    j.gpus = std::max<int64_t>(0, g);
    const LimitValue l = parse_slurm_duration(at(limit));
    j.time_limit_s = l.known() ? l.value : 0;
    if (j.submit > 0) out.push_back(std::move(j));
  }
  return out;
}

std::pair<int64_t, int64_t> assoc_mgr_tres(const std::string& list, const std::string& key) {
  for (const std::string& item : text::split(list, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || item.substr(0, eq) != key) continue;
    const std::string v = item.substr(eq + 1);
    const size_t paren = v.find('(');
    const std::string limit = v.substr(0, paren);
    int64_t used = -1;
    if (paren != std::string::npos) used = to_int(v.substr(paren + 1, v.find(')', paren) - paren - 1));
    return {limit == "N" ? -1 : to_int(limit), used};
  }
  return {-1, -1};
}

std::vector<QuotaFacts> parse_assoc_mgr(const std::string& text, const std::string& user) {
  // Records start at "ClusterName=" (associations) or "QOS=" (QOS); their fields span lines.
  std::vector<std::string> records;
  for (const auto& line : lines_of(text)) {
    const std::string t = text::trim(line);
    if (t.rfind("ClusterName=", 0) == 0 || t.rfind("QOS=", 0) == 0)
      records.push_back(t);
    else if (!records.empty())
      records.back() += " " + t;
  }
  std::vector<QuotaFacts> out;
  for (const auto& r : records) {
    QuotaFacts q;
    if (r.rfind("QOS=", 0) == 0) {
      q.kind = "QOS";
      q.name = record_value(r, "QOS");
      q.name = q.name.substr(0, q.name.find('('));
    } else {
      const std::string account = record_value(r, "Account");
      std::string u = record_value(r, "UserName");
      u = u.substr(0, u.find('('));
      if (!u.empty() && u != user) continue;
      q.kind = u.empty() ? "account" : "association";
      q.name = u.empty() ? account : account + "/" + u;
      const std::string part = record_value(r, "Partition");
      if (!part.empty()) q.name += " (partition " + part + ")";
    }
    const auto mins = assoc_mgr_tres(record_value(r, "GrpTRESMins"), "gres/gpu");
    q.limit_gpu_minutes = mins.first, q.used_gpu_minutes = mins.second;
    const auto grp = assoc_mgr_tres(record_value(r, "GrpTRES"), "gres/gpu");
    q.grp_gpus = grp.first, q.grp_gpus_used = grp.second;
    q.max_gpus_per_job = assoc_mgr_tres(record_value(r, "MaxTRESPJ"), "gres/gpu").first;
    q.max_gpus_per_user = assoc_mgr_tres(record_value(r, "MaxTRESPU"), "gres/gpu").first;
    q.max_wall_s = parse_slurm_duration(record_value(r, "MaxWallPJ"));
    out.push_back(std::move(q));
  }
  return out;
}

std::vector<PartitionFacts> parse_partitions(const std::string& text) {
  std::vector<PartitionFacts> out;
  for (const auto& line : lines_of(text)) {
    const auto rec = parse_scontrol_record(text::trim(line));
    auto get = [&](const char* k) {
      const auto it = rec.find(k);
      return it == rec.end() ? std::string() : it->second;
    };
    PartitionFacts p;
    p.name = get("PartitionName");
    if (p.name.empty()) continue;
    p.is_default = get("Default") == "YES";
    p.state = get("State");
    p.nodes = std::max<int64_t>(0, to_int(get("TotalNodes"), 0));
    p.gpus = std::max<int64_t>(0, tres_gpu_count(get("TRES")));
    p.gpus_per_node = p.nodes > 0 ? p.gpus / p.nodes : 0;
    p.max_time_s = parse_slurm_duration(get("MaxTime"));
    p.max_nodes = parse_slurm_duration(get("MaxNodes")).kind == LimitValue::kUnlimited ? LimitValue::unlimited()
                  : to_int(get("MaxNodes")) >= 0 ? LimitValue::of(to_int(get("MaxNodes")))
                                                 : LimitValue::unknown();
    out.push_back(std::move(p));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const PartitionFacts& a, const PartitionFacts& b) { return a.is_default > b.is_default; });
  return out;
}

std::vector<ReservationFacts> parse_reservations(const std::string& text) {
  std::vector<ReservationFacts> out;
  for (const auto& line : lines_of(text)) {
    const auto rec = parse_scontrol_record(text::trim(line));
    auto get = [&](const char* k) {
      const auto it = rec.find(k);
      return it == rec.end() || it->second == "(null)" ? std::string() : it->second;
    };
    ReservationFacts r;
    r.name = get("ReservationName");
    if (r.name.empty()) continue;
    r.start = parse_slurm_datetime(get("StartTime"));
    r.end = parse_slurm_datetime(get("EndTime"));
    r.nodes = get("Nodes");
    r.node_count = std::max<int64_t>(0, to_int(get("NodeCnt"), 0));
    r.partition = get("PartitionName");
    r.users = get("Users"), r.accounts = get("Accounts"), r.flags = get("Flags");
    r.maintenance = ("," + r.flags + ",").find(",MAINT,") != std::string::npos;
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(),
            [](const ReservationFacts& a, const ReservationFacts& b) { return a.start < b.start; });
  return out;
}

std::string parse_cluster_name(const std::string& text) {
  for (const auto& line : lines_of(text)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos && text::trim(line.substr(0, eq)) == "ClusterName")
      return text::trim(line.substr(eq + 1));
  }
  return "";
}

int64_t gres_gpu_count(const std::string& gres) {
  std::string flat;  // without the "(S:0-1)" / "(IDX:0,2)" parts, whose commas are not the list's
  int depth = 0;
  for (char c : gres) {
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (depth == 0 && c != ')') flat += c;
  }
  int64_t n = 0;
  for (const auto& item : text::split(flat, ',')) {
    if (item.rfind("gpu", 0) != 0) continue;
    const size_t colon = item.rfind(':');
    n += colon == std::string::npos ? 1 : std::max<int64_t>(0, to_int(item.substr(colon + 1), 0));
  }
  return n;
}

std::map<std::string, NodeGpus> parse_node_gpus(const std::string& text) {
  std::map<std::string, NodeGpus> out;
  for (const auto& line : lines_of(text)) {
    const auto rec = parse_scontrol_record(text::trim(line));
    auto get = [&](const char* k) {
      const auto it = rec.find(k);
      return it == rec.end() ? std::string() : it->second;
    };
    const std::string state = get("State");
    const bool usable = state.find("DOWN") == std::string::npos && state.find("DRAIN") == std::string::npos &&
                        state.find("FAIL") == std::string::npos && state.find("NOT_RESPONDING") == std::string::npos &&
                        state.find('*') == std::string::npos;
    // GPUs as TRES where the accounting counts them (AccountingStorageTRES=gres/gpu), else as GRES.
    int64_t cfg = tres_gpu_count(get("CfgTRES")), used = 0;
    if (cfg >= 0) {
      used = std::max<int64_t>(0, tres_gpu_count(get("AllocTRES")));
    } else {
      cfg = gres_gpu_count(get("Gres"));
      used = gres_gpu_count(get("GresUsed"));
    }
    for (const auto& part : text::split(get("Partitions"), ',')) {
      if (part.empty()) continue;
      out[part].gpus += cfg;
      if (usable && cfg > 0) out[part].node_free.push_back(std::max<int64_t>(0, cfg - used));
    }
  }
  return out;
}

std::map<std::string, std::vector<int64_t>> parse_queue(const std::string& text) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& line : lines_of(text)) {
    const auto f = text::split(text::trim(line), '|');
    if (f.size() < 5) continue;
    auto& q = out[f[2]];
    q.resize(4, 0);
    const int64_t nodes = std::max<int64_t>(1, to_int(f[3], 1));
    // %b: "gres:gpu:4" or "gres:gpu:a100:4" (per node), "N/A" without GPUs.
    int64_t per_node = 0;
    if (f[4].find("gpu") != std::string::npos)
      per_node = std::max<int64_t>(0, to_int(f[4].substr(f[4].rfind(':') + 1), 0));
    if (f[1] == "PENDING") {
      ++q[0];
      q[1] += per_node * nodes;
      // %S of a pending job: the start backfill plans for it ("N/A" before it has planned one).
      const int64_t planned = f.size() > 5 ? parse_slurm_datetime(f[5]) : 0;
      if (planned > 0 && (q[3] == 0 || planned < q[3])) q[3] = planned;
    } else if (f[1] == "RUNNING") {
      ++q[2];
    }
  }
  return out;
}

namespace {

// One line for a command that failed: its first line of output, or that it could not be run.
std::string failure(const std::string& what, const CommandOutput& r) {
  const auto l = lines_of(r.text);
  return what +
         (r.rc < 0 ? " could not be run" : ": " + (l.empty() ? "exit " + std::to_string(r.rc) : text::trim(l[0])));
}

std::string joined(const std::vector<std::string>& v, const char* sep = ",") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

void read_partitions(ClusterReading& c, const ClusterQuery& q, const CommandRunner& run) {
  c.sources.push_back("scontrol show partition -o");
  const CommandOutput parts = run_merged(run, {"scontrol", "show", "partition", "-o"});
  if (parts.rc != 0) {
    c.notes.push_back(failure("scontrol show partition", parts) + ": no partition facts");
    return;
  }
  c.partitions = parse_partitions(parts.text);
  if (!q.partition.empty()) {
    std::vector<std::string> names;
    for (const auto& p : c.partitions) names.push_back(p.name);
    const auto it = std::find_if(c.partitions.begin(), c.partitions.end(),
                                 [&](const PartitionFacts& p) { return p.name == q.partition; });
    if (it == c.partitions.end())
      throw ConfigError("--partition " + q.partition + ": Slurm has no such partition (" + joined(names, ", ") + ")",
                        "name one sinfo lists");
    c.partitions = {*it};
  }
  // The cluster's name keys the samples gtrain keeps of it (cluster_samples.h); unknown is no loss.
  const CommandOutput config = run_merged(run, {"scontrol", "show", "config"});
  if (config.rc == 0) c.cluster = parse_cluster_name(config.text);
  if (q.read_reservations) {
    c.sources.push_back("scontrol show reservation -o");
    const CommandOutput res = run_merged(run, {"scontrol", "show", "reservation", "-o"});
    if (res.rc == 0)
      c.reservations = parse_reservations(res.text);
    else
      c.notes.push_back(failure("scontrol show reservation", res) + ": reservations (maintenance windows) unknown");
  }
  c.sources.push_back("scontrol show node -d -o");
  const CommandOutput nodes = run_merged(run, {"scontrol", "show", "node", "-d", "-o"});
  const auto node_gpus = nodes.rc == 0 ? parse_node_gpus(nodes.text) : std::map<std::string, NodeGpus>{};
  if (nodes.rc != 0) c.notes.push_back(failure("scontrol show node", nodes) + ": free GPUs now unknown");
  c.sources.push_back("squeue -h -t PD,R -o %i|%T|%P|%D|%b|%S");
  const CommandOutput queue = run_merged(run, {"squeue", "-h", "-t", "PD,R", "-o", "%i|%T|%P|%D|%b|%S"});
  const auto queued = queue.rc == 0 ? parse_queue(queue.text) : std::map<std::string, std::vector<int64_t>>{};
  if (queue.rc != 0) c.notes.push_back(failure("squeue", queue) + ": the queue now is unknown");
  for (auto& p : c.partitions) {
    if (nodes.rc == 0) {
      const auto it = node_gpus.find(p.name);
      p.free_gpus = it == node_gpus.end() ? 0 : it->second.free();
      if (it != node_gpus.end()) p.node_free = it->second.node_free;
      // A partition's TRES lacks gres/gpu where the accounting does not count GPUs: its nodes' GRES.
      if (p.gpus == 0 && it != node_gpus.end() && it->second.gpus > 0) {
        p.gpus = it->second.gpus;
        p.gpus_per_node = p.nodes > 0 ? p.gpus / p.nodes : 0;
      }
    }
    if (queue.rc == 0) {
      const auto it = queued.find(p.name);
      const std::vector<int64_t> z = {0, 0, 0, 0};
      const auto& v = it == queued.end() ? z : it->second;
      p.pending_jobs = v[0], p.pending_gpus = v[1], p.running_jobs = v[2], p.next_planned_start = v[3];
    }
  }
}

void read_history(ClusterReading& c, const ClusterQuery& q, const CommandRunner& run) {
  std::vector<std::string> argv = {"sacct",
                                   "--allusers",
                                   "--parsable2",
                                   "-X",
                                   "--starttime",
                                   text::local_time(static_cast<double>(q.since_unix), "%Y-%m-%dT%H:%M:%S"),
                                   "--endtime",
                                   text::local_time(static_cast<double>(q.until_unix), "%Y-%m-%dT%H:%M:%S"),
                                   "--format=JobID,User,Account,Partition,QOS,Submit,Start,End,AllocTRES,ReqTRES,"
                                   "Timelimit,State"};
  if (!q.partition.empty()) argv.insert(argv.end() - 1, {"--partition", q.partition});
  std::string shown;
  for (const auto& a : argv) shown += (shown.empty() ? "" : " ") + a;
  c.sources.push_back(shown);
  const CommandOutput r = run_merged(run, argv);
  if (r.rc != 0) {
    c.notes.push_back(failure("sacct", r) +
                      ": no job history (is accounting enabled?), so no hour-of-week profile or prediction from it");
    return;
  }
  c.history_read = true;
  c.history_from = q.since_unix, c.history_to = q.until_unix;
  c.history = parse_sacct_jobs(r.text);
  for (const auto& j : c.history) {
    if (!j.user.empty() && j.user != q.user) c.history_all_users = true;
  }
  if (!c.history_all_users && !c.history.empty())
    c.notes.push_back("sacct showed only " + q.user + "'s jobs (PrivateData=jobs, or nobody else ran): the profile " +
                      "counts only them, so GPUs may look freer than they were");
}

void read_quotas(ClusterReading& c, const ClusterQuery& q, const CommandRunner& run) {
  c.sources.push_back("sacctmgr -nP show assoc where user=" + q.user + " format=Account,Partition,QOS,DefaultQOS");
  const CommandOutput assoc = run_merged(
      run, {"sacctmgr", "-nP", "show", "assoc", "where", "user=" + q.user, "format=Account,Partition,QOS,DefaultQOS"});
  if (assoc.rc != 0 || lines_of(assoc.text).empty()) {
    c.notes.push_back((assoc.rc != 0 ? failure("sacctmgr", assoc) : "sacctmgr lists no association for " + q.user) +
                      ": accounts, QOS and quotas unknown");
    return;
  }
  std::vector<std::string> accounts, qos;
  std::string default_qos;
  for (const auto& line : lines_of(assoc.text)) {
    const auto f = text::split(text::trim(line), '|');
    if (f.size() < 4) continue;
    if (std::find(accounts.begin(), accounts.end(), f[0]) == accounts.end()) accounts.push_back(f[0]);
    for (const auto& name : text::split(f[2], ','))
      if (!name.empty() && std::find(qos.begin(), qos.end(), name) == qos.end()) qos.push_back(name);
    if (default_qos.empty()) default_qos = f[3];
  }
  c.sources.push_back("sacctmgr -nP show user " + q.user + " format=DefaultAccount");
  const CommandOutput user = run_merged(run, {"sacctmgr", "-nP", "show", "user", q.user, "format=DefaultAccount"});
  const std::string default_account =
      user.rc == 0 && !lines_of(user.text).empty() ? text::trim(lines_of(user.text)[0]) : "";
  const std::vector<std::pair<std::string, std::vector<std::string>>> asks = {
      {"flags=assoc", {"scontrol", "show", "assoc_mgr", "flags=assoc", "accounts=" + joined(accounts)}},
      {"flags=qos", {"scontrol", "show", "assoc_mgr", "flags=qos", "qos=" + joined(qos)}}};
  for (const auto& [what, argv] : asks) {
    if (argv.back().back() == '=') continue;
    const std::string shown = joined(argv, " ");
    c.sources.push_back(shown);
    const CommandOutput r = run_merged(run, argv);
    if (r.rc != 0) {
      c.notes.push_back(failure(shown, r) + ": quota use unknown");
      continue;
    }
    for (auto& f : parse_assoc_mgr(r.text, q.user)) {
      f.source = shown;
      f.is_default = (f.kind == "QOS" && f.name == default_qos) || (f.kind == "account" && f.name == default_account);
      c.quotas.push_back(std::move(f));
    }
  }
}

}  // namespace

ClusterReading read_slurm_cluster(const ClusterQuery& q, const CommandRunner& run) {
  ClusterReading c;
  c.scheduler = "slurm";
  c.user = q.user;
  if (q.read_partitions) read_partitions(c, q, run);
  if (q.read_history) read_history(c, q, run);
  if (q.read_quotas) read_quotas(c, q, run);
  return c;
}

}  // namespace gtrain
