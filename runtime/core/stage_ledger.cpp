// stage_ledger.cpp: stages.jsonl records written by rank 0's trainer.
#include "runtime/core/stage_ledger.h"

#include <cstring>
#include <fstream>
#include <iostream>

#include "runtime/core/disk_space.h"

namespace gtrain {

nlohmann::json StageRecord::to_json() const {
  nlohmann::json rec = {{"start", start},
                        {"end", end},
                        {"allocation", allocation},
                        {"world", world},
                        {"step_from", step_from},
                        {"step_to", step_to},
                        {"total_steps", total_steps},
                        {"samples", samples},
                        {"productive_s", productive_s},
                        {"save_s", save_s},
                        {"load_s", load_s},
                        {"exit", exit}};
  if (!plan.empty()) rec["plan"] = plan;
  if (!stop_detail.empty()) rec["stop_detail"] = stop_detail;
  if (threads) {
    rec["threads"] = *threads;
    rec["threads_measured"] = threads_measured;
  }
  // What this stage changed in the configuration since the checkpoint it resumed: [was, now].
  if (!config_changes.empty()) rec["config_changes"] = config_changes;
  if (restarts > 0) rec["restarts"] = restarts;
  if (!reported_by.empty()) rec["reported_by"] = reported_by;
  return rec;
}

std::string stage_exit(const std::string& stop_reason, bool stopped_early) {
  if (stop_reason.rfind("failed: ", 0) == 0) return stop_reason;
  return stopped_early ? "resumable: " + stop_reason : std::string("completed");
}

void StageLedger::append(const StageRecord& record) const {
  if (!enabled()) return;
  if (!append_record_line(path_, record.to_json().dump()))
    std::cerr << "gtrain: warning: could not write " << path_ << " (" << std::strerror(errno)
              << "): this stage's record (" << record.exit << ") is lost" << std::endl;
}

nlohmann::json StageLedger::records() const {
  nlohmann::json out = nlohmann::json::array();
  if (!enabled()) return out;
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return out;
}

}  // namespace gtrain
