// calibration_report.cpp: `gtrain plan --calibrate` around the measurement: where the profile goes,
// saving it, and what the command prints.
#include "launcher/commands/calibration_report.h"

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/machine_notes.h"

namespace gtrain {

CalibrationReport run_calibration(const std::map<std::string, std::string>& env, const HardwareInfo& hw,
                                  const MeasureMachine& measure) {
  CalibrationReport r;
  r.path = profile_path(env, hw.hostname);
  if (r.path.empty()) throw ConfigError("--calibrate: nowhere to save the profile", "set GTRAIN_PROFILE_DIR or HOME");
  r.c = measure(hw);
  save_profile(r.c.profile, r.path);
  forget_machine_note(env, hw.hostname, kEstimateOffNote);  // estimates from the new profile: say again if off
  return r;
}

nlohmann::json calibration_json(const CalibrationReport& r) {
  const Calibration& c = r.c;
  return {{"device", c.device},
          {"matmul_fp32_flops", c.matmul_fp32_flops},
          {"matmul_bf16_flops", c.matmul_bf16_flops},
          {"copy_bytes_per_s", c.copy_bw},
          {"allreduce_bytes_per_s", c.profile.intra_node_bw},
          {"allreduce_measured_by", c.profile.kind == DeviceKind::cpu ? "memcpy proxy" : "table (not measured)"},
          {"seconds", c.seconds},
          {"saved_to", r.path},
          {"profile", profile_to_json(c.profile)}};
}

void render_calibration(const CalibrationReport& r, std::ostream& out) {
  const Calibration& c = r.c;
  out << "gtrain plan --calibrate: " << c.device << "\n"
      << "  matmul fp32      " << strf("%.1f", c.matmul_fp32_flops / 1e9) << " GFLOP/s\n"
      << "  matmul bf16      " << strf("%.1f", c.matmul_bf16_flops / 1e9) << " GFLOP/s\n"
      << "  memory copy      " << strf("%.2f", c.copy_bw / 1e9) << " GB/s (read + write)\n"
      << (c.profile.per_thread() ? "  one thread       matmul " + strf("%.1f", c.profile.fp32_flops_1thread / 1e9) +
                                       " GFLOP/s (half that at n = " + strf("%.0f", c.profile.matmul_half_size) +
                                       "), elementwise " + strf("%.2f", c.profile.elementwise_bw / 1e9) + " GB/s, " +
                                       strf("%.1f", c.profile.launch_overhead_s * 1e6) + " us per op\n"
                                 : std::string())
      << "  allreduce bw     " << strf("%.2f", c.profile.intra_node_bw / 1e9) << " GB/s "
      << (c.profile.kind == DeviceKind::cpu
              ? "(memcpy proxy: half the copy bandwidth; measured over MPI once the communicator exists)"
              : "(from the table; not measured yet)")
      << "\n  saved to " << r.path << " (" << strf("%.1f", c.seconds) << " s); later plans on this host use it\n";
}

}  // namespace gtrain
