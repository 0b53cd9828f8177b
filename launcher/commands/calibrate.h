// calibrate.h: `gtrain plan --calibrate`: measures this machine's matmul rate and a bandwidth
// proxy and turns them into a HardwareProfile that later plans use.
#pragma once

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

// Times square matmuls (fp32 and bf16) and a large memory copy for about `budget_s` seconds in
// total. The allreduce bandwidth is a memcpy-based proxy until the MPI communicator exists: on a
// CPU node ranks exchange through shared memory, so half the copy bandwidth stands in for it.
Calibration calibrate_this_machine(const HardwareInfo& hw, double budget_s = 3.0);

// --calibrate: this machine measured, and where its profile was saved.
struct CalibrationReport {
  Calibration c;
  std::string path;
};
// Measures this machine, saves its profile (profile_path) and forgets the estimate-off note, so a
// still-off estimate is said again.
CalibrationReport run_calibration(const std::map<std::string, std::string>& env, const HardwareInfo& hw);
nlohmann::json calibration_json(const CalibrationReport& r);
void render_calibration(const CalibrationReport& r, std::ostream& out);

}  // namespace gtrain
