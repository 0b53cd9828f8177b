// calibrate.h: `gtrain plan --calibrate`'s measurement: this machine's matmul rate and a bandwidth
// proxy, timed with LibTorch, as the HardwareProfile later plans use (calibration_report.h saves it).
#pragma once

#include "launcher/base/hardware_query.h"
#include "launcher/commands/calibration_report.h"

namespace gtrain {

// Times square matmuls (fp32 and bf16) and a large memory copy for about `budget_s` seconds in
// total. The allreduce bandwidth is a memcpy-based proxy until the MPI communicator exists: on a
// CPU node ranks exchange through shared memory, so half the copy bandwidth stands in for it.
Calibration calibrate_this_machine(const HardwareInfo& hw, double budget_s = 3.0);

}  // namespace gtrain
