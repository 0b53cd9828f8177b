// calibration_report.h: `gtrain plan --calibrate` around the measurement (LibTorch's, calibrate.h):
// the profile saved for later plans, and the report as text or JSON.
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "launcher/base/hardware_query.h"
#include "strategies/planner/hardware_profile.h"

namespace gtrain {

struct Calibration {
  HardwareProfile profile;
  std::string device;            // "cpu (2 threads)" or the GPU name
  double matmul_fp32_flops = 0;  // measured
  double matmul_bf16_flops = 0;  // measured
  double copy_bw = 0;            // bytes/s moved by a large memcpy (read + write)
  double seconds = 0;            // time spent measuring
};

// Measures this machine: gtrain-worker's calibrate_this_machine (calibrate.h); in gtrain a hand-off
// of the command to gtrain-worker.
using MeasureMachine = std::function<Calibration(const HardwareInfo&)>;

// --calibrate: this machine measured, and where its profile was saved.
struct CalibrationReport {
  Calibration c;
  std::string path;
};
// Measures this machine with `measure`, saves its profile (profile_path) and forgets the estimate-off
// note, so a still-off estimate is said again.
CalibrationReport run_calibration(const std::map<std::string, std::string>& env, const HardwareInfo& hw,
                                  const MeasureMachine& measure);
nlohmann::json calibration_json(const CalibrationReport& r);
void render_calibration(const CalibrationReport& r, std::ostream& out);

}  // namespace gtrain
