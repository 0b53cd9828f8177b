// worker_main.cpp: gtrain-worker, the LibTorch half of gtrain (every command; the ranks of a run):
// start-up tuning, then the CLI; the only place its errors are caught.
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <cstdlib>
#include <string>

#include "launcher/cli/cli.h"
#include "launcher/launch/stage_handoff.h"
#include "runtime/core/disk_space.h"
#include "runtime/core/errors.h"
#include "runtime/core/rank_output.h"
#include "runtime/core/schedule.h"
#include "runtime/core/startup.h"

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
    return gtrain::cli_main(argc, argv);
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
