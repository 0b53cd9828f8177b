// stage_handoff.cpp: StageHandoff to and from the GTRAIN_INTERNAL_* environment variables.
#include "launcher/launch/stage_handoff.h"

#include <cstdlib>

#include "launcher/scheduler/hostlist.h"

namespace gtrain {

namespace {

std::string value_of(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? std::string() : it->second;
}

// "host=0,1;host2=" -> per host; nullopt when malformed.
std::optional<std::vector<std::pair<std::string, std::vector<int>>>> parse_granted(const std::string& text) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(';', at), text.size());
    const std::string entry = text.substr(at, end - at);
    at = end + 1;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    std::vector<int> gpus;
    size_t p = eq + 1;
    while (p < entry.size()) {
      const size_t q = std::min(entry.find(',', p), entry.size());
      const std::string item = entry.substr(p, q - p);
      if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 6) {
        return std::nullopt;
      }
      gpus.push_back(std::stoi(item));
      p = q + 1;
    }
    out.emplace_back(entry.substr(0, eq), std::move(gpus));
  }
  return out;
}

// `host`'s entry of `hosts` (exact or short-name match); nullopt when it is not listed.
std::optional<std::vector<int>> find_host(const std::vector<std::pair<std::string, std::vector<int>>>& hosts,
                                          const std::string& host) {
  for (const auto& [name, gpus] : hosts) {
    if (same_host(name, host)) return gpus;
  }
  return std::nullopt;
}

}  // namespace

std::string format_granted(const std::vector<std::pair<std::string, std::vector<int>>>& hosts) {
  std::string out;
  for (const auto& [host, gpus] : hosts) {
    if (!out.empty()) out += ';';
    out += host + '=';
    for (size_t i = 0; i < gpus.size(); ++i) out += (i ? "," : "") + std::to_string(gpus[i]);
  }
  return out;
}

std::optional<std::vector<int>> granted_for_host(const std::string& text, const std::string& host) {
  const auto hosts = parse_granted(text);
  if (!hosts) return std::nullopt;
  return find_host(*hosts, host);
}

std::map<std::string, std::string> StageHandoff::to_env() const {
  std::map<std::string, std::string> env;
  if (!locked_run_dir.empty()) env[kEnvStageLocked] = locked_run_dir;
  if (has_deadline) env[kEnvStageDeadline] = std::to_string(deadline_unix) + "|" + deadline_source;
  if (!allocation_json.empty()) env[kEnvStageAllocation] = allocation_json;
  if (has_granted) env[kEnvStageGranted] = format_granted(granted);
  if (!positions.empty()) env[kEnvStagePositions] = format_granted(positions);
  if (!stop_file.empty()) env[kEnvStageStopFile] = stop_file;
  if (!outcome_file.empty()) env[kEnvStageOutcomeFile] = outcome_file;
  if (!heartbeat_dir.empty()) env[kEnvStageHeartbeatDir] = heartbeat_dir;
  if (restarts > 0) env[kEnvStageRestarts] = std::to_string(restarts);
  return env;
}

StageHandoff StageHandoff::from_env(const std::map<std::string, std::string>& env) {
  StageHandoff h;
  h.locked_run_dir = value_of(env, kEnvStageLocked);
  const std::string d = value_of(env, kEnvStageDeadline);
  if (!d.empty()) {
    h.has_deadline = true;
    h.deadline_unix = std::atof(d.c_str());
    const size_t bar = d.find('|');
    h.deadline_source = bar == std::string::npos ? std::string() : d.substr(bar + 1);
  }
  h.allocation_json = value_of(env, kEnvStageAllocation);
  if (env.count(kEnvStageGranted)) {
    if (auto g = parse_granted(value_of(env, kEnvStageGranted))) {
      h.has_granted = true;
      h.granted = std::move(*g);
    }
  }
  if (auto p = parse_granted(value_of(env, kEnvStagePositions))) h.positions = std::move(*p);
  h.stop_file = value_of(env, kEnvStageStopFile);
  h.outcome_file = value_of(env, kEnvStageOutcomeFile);
  h.heartbeat_dir = value_of(env, kEnvStageHeartbeatDir);
  const std::string restarts = value_of(env, kEnvStageRestarts);
  h.restarts = !restarts.empty() && restarts.find_first_not_of("0123456789") == std::string::npos && restarts.size() < 6
                   ? std::stoi(restarts)
                   : 0;
  return h;
}

const std::vector<std::string>& StageHandoff::variables() {
  static const std::vector<std::string> names = {kEnvStageLocked,       kEnvStageDeadline, kEnvStageAllocation,
                                                 kEnvStageGranted,      kEnvStageStopFile, kEnvStageOutcomeFile,
                                                 kEnvStageHeartbeatDir, kEnvStageRestarts, kEnvStagePositions};
  return names;
}

std::optional<std::vector<int>> StageHandoff::granted_for(const std::string& host) const {
  if (!has_granted) return std::nullopt;
  return find_host(granted, host);
}

std::vector<int> StageHandoff::positions_for(const std::string& host) const {
  return find_host(positions, host).value_or(std::vector<int>{});
}

}  // namespace gtrain
