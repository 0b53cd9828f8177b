// worker_main.cpp: gtrain-worker, the LibTorch half of gtrain (the commands gtrain hands on; the ranks
// of a run): start-up tuning, then the CLI with the LibTorch work; the only place its errors are caught.
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "launcher/cli/cli.h"
#include "launcher/commands/calibrate.h"
#include "launcher/commands/ckpt_commands.h"
#include "launcher/commands/distill_command.h"
#include "launcher/commands/job_sizing.h"
#include "launcher/commands/run_command.h"
#include "launcher/commands/sample_command.h"
#include "launcher/launch/stage_handoff.h"
#include "runtime/core/disk_space.h"
#include "runtime/core/errors.h"
#include "runtime/core/rank_output.h"
#include "runtime/core/schedule.h"
#include "runtime/core/startup.h"
#include "runtime/models/model_registry.h"

namespace gtrain {
namespace {

// `gtrain run` in this process: train, then say how the stage ended. A rank under gtrain's own
// mpirun says "resumable" through the outcome file and exits 0, so mpirun ends quietly (a non-zero
// exit makes it print an abort notice); gtrain exits 3. Written before MPI is finalised: a
// scheduler's TERM may have reached mpirun too, which then ends the ranks, and the stage's
// checkpoint is committed already.
int run_and_report(const RunOptions& run) {
  const RunOutcome out = run_job(run);
  if (out.launcher_exit >= 0) return out.launcher_exit;
  const std::string outcome = StageHandoff::from_env(process_environment()).outcome_file;
  const bool under_launcher = !outcome.empty();
  if (out.summary.stopped_early && under_launcher && ProcessContext::get().rank == 0) {
    std::ofstream(outcome) << "resumable\n";
  }
  finish_run_process();
  if (!out.summary.stopped_early) return kExitOk;
  return under_launcher ? kExitOk : kExitResumable;
}

// What the commands do with LibTorch, done here.
LibTorchWork libtorch_work() {
  LibTorchWork w;
  w.run = run_and_report;
  w.sample = sample_command;
  w.distill_cache = distill_cache_command;
  w.ckpt_verify = ckpt_verify_command;
  w.ckpt_export = ckpt_export_command;
  w.model_names = [](const std::string& plugin) {
    auto& reg = ModelRegistry::global();
    reg.load_plugin(plugin);
    return reg.names();
  };
  w.measure_machine = [](const HardwareInfo& hw) { return calibrate_this_machine(hw); };
  w.size_job = describe_job_with_libtorch;
  return w;
}

}  // namespace
}  // namespace gtrain

int main(int argc, char** argv) {
  gtrain::tune_malloc();
  // LibTorch reads TORCH_CPP_LOG_LEVEL (its C++ log level; --quiet sets ERROR) only here: python's
  // torch calls this when imported, a C++ program must itself.
  c10::initLogging();
  gtrain::ignore_closed_console();
  // gtrain hands on a stop signal it caught, blocked (pending); `run` records it, the rest act as usual.
  if (argc > 1 && std::string(argv[1]) == "run") gtrain::install_stop_signals(gtrain::ScheduleConfig{}.stop_signals);
  gtrain::block_stop_signals(false);
  try {
    return gtrain::cli_main(argc, argv, gtrain::libtorch_work());
  } catch (const gtrain::Error& e) {
    // Under a launching gtrain: an error a restart would meet again ends the stage, not the attempt.
    // A full disk says so on the next line, for the launcher's stage record (the reserve beside the
    // outcome file gives the room to say it).
    if (const char* outcome = std::getenv(gtrain::kEnvStageOutcomeFile); outcome && *outcome && !e.retryable()) {
      std::string said = "fatal";
      if (dynamic_cast<const gtrain::DiskFullError*>(&e)) said += std::string("\nfailed: disk full: ") + e.what();
      gtrain::append_record_line(outcome, said);
    }
    return gtrain::fail_process(gtrain::format_error(e), e.exit_code());
  } catch (const c10::Error& e) {
    return gtrain::fail_process(std::string("gtrain: torch error: ") + e.what_without_backtrace(),
                                gtrain::kExitFailure);
  } catch (const std::exception& e) {
    return gtrain::fail_process(std::string("gtrain: error: ") + e.what(), gtrain::kExitFailure);
  }
}
