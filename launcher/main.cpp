// main.cpp: the gtrain executable, torch-free so a command answers without loading LibTorch: it
// parses every command and runs those that need no LibTorch itself; `gtrain run` starts its ranks
// (mpirun over gtrain-worker) when it can plan the model without LibTorch; whatever needs LibTorch
// it hands to gtrain-worker, same arguments (libtorch_work.h). The only place its errors are caught.
#include <cstring>
#include <functional>

#include "launcher/cli/cli.h"
#include "launcher/launch/launch.h"
#include "launcher/launch/run_launch.h"
#include "runtime/core/errors.h"
#include "runtime/core/rank_output.h"
#include "runtime/core/schedule.h"
#include "runtime/core/startup.h"

namespace gtrain {
namespace {

// `gtrain run` when this process launches the ranks and the model's sizes are known from the
// config: plan and lock here, then run mpirun (several ranks: returns its exit code) or return -1
// for the worker to handle the command as it is (one rank, or a model LibTorch must size).
int launch_run_fast(const RunOptions& run) {
  // --quiet: only errors on the console, LibTorch's own warnings in the ranks included; set before
  // the worker starts, which reads them when LibTorch loads: glog's level (Debian's LibTorch 1.13),
  // c10's own logger (pip's 2.x, no glog) and Kineto's (its profiler; on a machine without a GPU
  // it reports the failed device count of a CUDA LibTorch as an error).
  if (run.quiet) {
    setenv("GLOG_minloglevel", "2", 0);
    setenv("TORCH_CPP_LOG_LEVEL", "ERROR", 0);
    setenv("KINETO_LOG_LEVEL", "5", 0);
  }
  const auto env = process_environment();
  if (detect_rank_environment(env).launched) return -1;  // one task of an srun / mpirun launch
  JobConfig cfg = load_job_config(run.config_path, run.sets, env);
  if (stage_prepared(env, resolve_run_dir(cfg, run))) return -1;
  // Text data is tokenized (or found tokenized) once, here, before any rank starts; the worker
  // this process may become, and the ranks, take the folder from the environment.
  resolve_text_data(cfg, resolve_run_dir(cfg, run), env, /*launcher=*/true, run.quiet);
  const bool batch_from_checkpoint =
      !keep_checkpoint_batch(cfg, run, resolve_run_dir(cfg, run)).empty();  // the worker says so
  const auto stats = model_stats_from_config(cfg);
  if (!stats) return -1;  // the model must be built (LibTorch) to be planned
  // Bad layouts fail here, once, before any rank starts; several ranks: mpirun replaces us.
  StageLaunch stage = launch_stage(run, cfg, process_environment(), worker_executable(), [&](const Allocation& alloc) {
    // A grant may be used in part; --ranks N asks for exactly N.
    return plan_run(cfg, *stats, alloc.world_size(), alloc.world_size(), launch_plan_device(cfg, alloc),
                    /*use_fewer_ranks=*/alloc.ranks_override == 0, batch_from_checkpoint);
  });
  if (stage.exit_code >= 0) return stage.exit_code;  // several ranks ran under mpirun
  // One rank: the worker inherits the lock (not close-on-exec) and the stage facts.
  stage.lock.release();
  return -1;
}

// Sets `entry` to replace this process with gtrain-worker, same arguments.
template <class R, class... Args>
void hand_off(std::function<R(Args...)>& entry, int argc, char** argv) {
  entry = [argc, argv](Args...) -> R { exec_worker(argc, argv); };
}

// gtrain's LibTorch work: every entry hands the command to gtrain-worker; `run` first launches the
// ranks itself when it can.
LibTorchWork handed_off_work(int argc, char** argv) {
  LibTorchWork w;
  w.run = [argc, argv](const RunOptions& run) {
    const int rc = launch_run_fast(run);
    if (rc >= 0) return rc;
    exec_worker(argc, argv);
  };
  hand_off(w.sample, argc, argv);
  hand_off(w.distill_cache, argc, argv);
  hand_off(w.ckpt_verify, argc, argv);
  hand_off(w.ckpt_export, argc, argv);
  hand_off(w.model_names, argc, argv);
  hand_off(w.measure_machine, argc, argv);
  hand_off(w.size_job, argc, argv);
  return w;
}

}  // namespace
}  // namespace gtrain

int main(int argc, char** argv) {
  gtrain::tune_malloc();
  gtrain::prefer_passive_openmp();
  gtrain::ignore_closed_console();
  try {
    // From the first moment: a stop signal is a request to stop (schedule.h), never lost or fatal.
    if (argc > 1 && std::strcmp(argv[1], "run") == 0)
      gtrain::install_stop_signals(gtrain::ScheduleConfig{}.stop_signals);
    return gtrain::cli_main(argc, argv, gtrain::handed_off_work(argc, argv));
  } catch (const gtrain::Error& e) {
    return gtrain::fail_process(gtrain::format_error(e), e.exit_code());
  } catch (const std::exception& e) {
    return gtrain::fail_process(std::string("gtrain: error: ") + e.what(), gtrain::kExitFailure);
  }
}
