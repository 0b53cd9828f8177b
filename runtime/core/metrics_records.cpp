// metrics_records.cpp: metrics.jsonl read back.
#include "runtime/core/metrics_records.h"

#include <fstream>

#include <nlohmann/json.hpp>

namespace gtrain {

bool has_final_record(const std::string& path, int64_t step) {
  std::ifstream in(path);
  std::string line;
  bool found = false;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("kind") && j["kind"] == "final" && j.contains("step") &&
        j["step"].is_number_integer() && j["step"].get<int64_t>() == step)
      found = true;
  }
  return found;
}

}  // namespace gtrain
