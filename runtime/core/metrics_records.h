// metrics_records.h: reading back metrics.jsonl, the records MetricsLog writes (torch-free).
#pragma once

#include <cstdint>
#include <string>

namespace gtrain {

// Whether metrics.jsonl at `path` holds the "final" record of step `step` (a run that completed
// there). A line that does not parse, or a missing file, holds none.
bool has_final_record(const std::string& path, int64_t step);

}  // namespace gtrain
