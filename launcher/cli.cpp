// cli.cpp: gtrain subcommands (run, submit, cancel, status, probe, plan, config, models) and their flags, each declared
// once with its help text.
#include "launcher/cli.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "launcher/chain.h"
#include "launcher/plan_command.h"
#include "launcher/probe_command.h"
#include "launcher/program_runner.h"
#include "launcher/run_command.h"
#include "launcher/stage_commands.h"
#include "launcher/submit_command.h"
#include "runtime/common/errors.h"
#include "runtime/config/job_config.h"
#include "runtime/models/model_registry.h"
#include "runtime/train/schedule.h"

namespace gtrain {

int cli_main(int argc, char** argv) {
  CLI::App app{"gtrain: train on whatever GPUs the scheduler granted, resume on any other count.", "gtrain"};
  app.set_version_flag("--version", "gtrain 0.1.0");
  app.require_subcommand(1);

  RunOptions run;
  auto* run_cmd = add_run_command(app, run);

  auto* config_cmd = app.add_subcommand("config", "Show configuration.");
  config_cmd->require_subcommand(1);
  config_cmd->add_subcommand("reference", "Print every key with its default and meaning.");
  std::string show_path;
  std::vector<std::string> show_sets;
  auto* show = config_cmd->add_subcommand("show", "Print the resolved config (file + env + --set).");
  show->add_option("config", show_path, "TOML config file")->required();
  show->add_option("--set", show_sets, "Override a key: section.key=value")->allow_extra_args(false);

  ProbeOptions probe;
  auto* probe_cmd = app.add_subcommand(
      "probe", "Show what the scheduler granted (nodes, GPUs, CPUs, time) and the limits that bind.");
  probe_cmd->add_flag("--json", probe.json, "Print JSON instead of text");
  probe_cmd->add_flag("!--no-limits", probe.read_limits, "Do not run squeue/scontrol/sacctmgr/qstat");

  PlanOptions plan;
  auto* plan_cmd = app.add_subcommand("plan",
                                      "Choose the parallel layout (dp/tp/pp/ZeRO/micro-batch) for a config, "
                                      "with estimates, alternatives and a what-if table over GPU counts.");
  plan_cmd->add_option("config", plan.config_path, "TOML config file (optional with --calibrate)");
  plan_cmd->add_option("--set", plan.sets, "Override a key: section.key=value")->allow_extra_args(false);
  plan_cmd
      ->add_option("--gpus", plan.gpus, "Plan for N GPUs, or for each of a list (1,2,4,8) instead of what was granted")
      ->type_name("N|LIST");
  plan_cmd
      ->add_option("--ranks", plan.ranks,
                   "Plan for the N ranks gtrain run --ranks N starts here (CPU ranks share this machine's nodes)")
      ->check(CLI::Range(1, 65536));
  plan_cmd->add_option("--nodes", plan.nodes, "Nodes the GPUs are spread over (default: 8 GPUs per node)")
      ->check(CLI::Validator(
          [](std::string& v) {
            return v.find_first_not_of("0123456789") == std::string::npos &&
                           v.find_first_not_of('0') != std::string::npos
                       ? std::string()
                       : "expected a node count >= 1, got '" + v + "'";
          },
          "N>=1"));
  plan_cmd->add_option("--gpu-mem", plan.gpu_mem, "Memory per GPU, e.g. 80GiB, 40GB, 81920MiB")->type_name("SIZE");
  plan_cmd->add_option("--gpu-type", plan.gpu_type,
                       "GPU model for the rates: V100-32GB, A100-40GB, A100-80GB, "
                       "H100-80GB, H200, L40S");
  plan_cmd->add_flag("--json", plan.json, "Print JSON instead of text");
  plan_cmd->add_flag("--explain", plan.explain, "List every candidate and the estimate breakdown");
  plan_cmd->add_flag(
      "--runnable", plan.runnable,
      "Only layouts gtrain run executes (today every layout the planner knows: dp, ZeRO 1-2, tp, pp, recompute)");
  plan_cmd->add_flag("--calibrate", plan.calibrate,
                     "Measure this machine (matmul rate, bandwidth) and save its "
                     "profile for later plans");

  std::string plugin;
  auto* models_cmd = app.add_subcommand("models", "List registered models.");
  models_cmd->add_option("--plugin", plugin, "Also load this model plugin library");

  std::string status_dir;
  bool status_json = false;
  auto* status_cmd = app.add_subcommand("status", "Progress, stages, goodput and ETA of a run directory.");
  status_cmd->add_option("run_dir", status_dir, "Run directory")->required();
  status_cmd->add_flag("--json", status_json, "Machine-readable output");

  SubmitOptions submit;
  auto* submit_cmd = app.add_subcommand("submit",
                                        "Write Slurm/PBS batch scripts into the run directory and submit them "
                                        "as a chain of stages that resume each other.");
  submit_cmd->add_option("config", submit.config_path, "TOML config file")->required();
  submit_cmd->add_option("--set", submit.sets, "Override a key (passed on to gtrain run)")->allow_extra_args(false);
  submit_cmd->add_option("--run-dir", submit.run_dir, "Run directory (default <log.root>/<log.name>)");
  submit_cmd->add_option("--scheduler", submit.scheduler, "slurm or pbs");
  submit_cmd->add_flag("--dry-run", submit.dry_run, "Write the scripts and print the commands; submit nothing");
  submit_cmd->add_option("--stages", submit.stages, "auto (one more stage while resumable) or a fixed number");
  submit_cmd
      ->add_option("--gpus", submit.gpus,
                   "GPUs per stage, or one count per stage (2,4,1); default: the "
                   "quota window's max_gpus, else 1, and at least one a node")
      ->type_name("N|LIST");
  submit_cmd->add_option("--nodes", submit.nodes, "Nodes per stage (default 1), or one count per stage")
      ->type_name("N|LIST");
  submit_cmd->add_option("--time", submit.time,
                         "Time limit of each stage (2h, 90m, 1h30m, HH:MM:SS, or Slurm's MM, MM:SS, D-HH, D-HH:MM, "
                         "D-HH:MM:SS; a plain number is minutes, as for sbatch)");
  submit_cmd->add_option("--partition", submit.partition, "Partition (PBS: queue)");
  submit_cmd->add_option("--account", submit.account, "Account to charge");
  submit_cmd->add_option("--qos", submit.qos, "Quality of service");
  submit_cmd->add_option("--sbatch-arg", submit.sbatch_args, "Extra directive, e.g. --constraint=a100 (repeatable)")
      ->allow_extra_args(false);
  submit_cmd
      ->add_option("--signal-lead", submit.signal_lead_s,
                   "Slurm: seconds before the limit USR1 is sent (default, or 0: measured save time x safety + "
                   "margin + 30). PBS: gtrain run's own deadline this long before the walltime (default 30; "
                   "it saves ahead of it). Seconds, or a duration such as 2m")
      ->transform(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v == "0") return "";
            try {  // the one duration reader; CLI11 then reads the whole seconds
              v = std::to_string(static_cast<int64_t>(std::ceil(parse_duration(v, "--signal-lead"))));
              return "";
            } catch (const ConfigError& e) {
              const std::string what = e.what(), prefix = "--signal-lead: ";  // CLI11 names the flag itself
              return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
            }
          },
          "DURATION"));
  submit_cmd->add_option("--launcher", submit.launcher, "How the job starts ranks: mpirun (default) or srun");
  submit_cmd
      ->add_option("--cpus-per-gpu", submit.cpus_per_gpu,
                   "CPU cores to request per GPU (Slurm --cpus-per-gpu, PBS ncpus); default 0: the site's default, "
                   "which on some sites is one core per task")
      ->check(CLI::Range(0, 1024));

  std::string cancel_dir;
  bool cancel_now = false;
  auto* cancel_cmd = app.add_subcommand(
      "cancel", "Cancel a submitted chain: queued stages go, the running one saves and exits 3 first.");
  cancel_cmd->add_option("run_dir", cancel_dir, "Run directory")->required();
  cancel_cmd->add_flag("--now", cancel_now,
                       "Cancel the running stage outright (the scheduler's TERM, then KILL after its grace time): "
                       "its ranks still save if they can before the KILL");

  // Called by the generated batch scripts, not by people.
  std::string step_dir, step_job;
  int step_stage = 0, step_exit = 0;
  auto* step_cmd = app.add_subcommand("chain-step", "(batch scripts) report a stage's exit code to its chain");
  step_cmd->group("");
  step_cmd->add_option("run_dir", step_dir)->required();
  step_cmd->add_option("--stage", step_stage)->required();
  step_cmd->add_option("--exit", step_exit)->required();
  step_cmd->add_option("--job", step_job);

  std::string ckpt_path;
  auto* ckpt_cmd = app.add_subcommand("ckpt", "Inspect, verify or export a checkpoint.");
  ckpt_cmd->require_subcommand(1);
  auto* inspect = ckpt_cmd->add_subcommand("inspect", "Print a checkpoint's manifest summary.");
  inspect->add_option("path", ckpt_path, "Checkpoint directory (or a run / checkpoints directory: the newest)")
      ->required();
  auto* verify = ckpt_cmd->add_subcommand("verify", "Check every piece's size and CRC32; exit 1 on a problem.");
  verify->add_option("path", ckpt_path, "Checkpoint directory (or a run / checkpoints directory: the newest)")
      ->required();
  bool verify_all = false;
  verify->add_flag("--all", verify_all, "Check every kept checkpoint of the directory, not only the newest");
  CkptExportOptions ckpt_export;
  auto* exporter = ckpt_cmd->add_subcommand(
      "export", "Write the model's full weights (any layout's checkpoint) to one .safetensors file.");
  exporter->add_option("path", ckpt_export.path, "Checkpoint directory (or a run / checkpoints directory: the newest)")
      ->required();
  exporter->add_option("out", ckpt_export.out, "The .safetensors file to write (replaced if it exists)")->required();
  exporter
      ->add_option("--dtype", ckpt_export.dtype,
                   "stored (the checkpoint's fp32 master weights), float32, bfloat16 or float16 (or fp32, bf16, "
                   "fp16, as precision.dtype spells them)")
      ->capture_default_str();
  exporter->add_flag("--optimizer", ckpt_export.optimizer,
                     "Also the optimizer's state (exp_avg, exp_avg_sq, momentum_buffer, optimizer.step)");

  // CLI11 reports a misspelt or missing command as "A subcommand is required" (a config error): a
  // usage error naming the command and its choices instead.
  {
    const CLI::App* cur = &app;
    std::string path = "gtrain";
    auto names_of = [](const CLI::App* a) {
      std::string names;
      for (const auto* sub : a->get_subcommands([](const CLI::App*) { return true; }))
        if (!sub->get_group().empty()) names += (names.empty() ? "" : ", ") + sub->get_name();
      return names;
    };
    int i = 1;
    for (; i < argc && argv[i][0] != '-'; ++i) {
      const auto subs = cur->get_subcommands([](const CLI::App*) { return true; });
      if (subs.empty()) break;
      const CLI::App* next = nullptr;
      for (const auto* a : subs) {
        if (a->check_name(argv[i])) next = a;
      }
      if (!next) throw UsageError(path + ": unknown command '" + argv[i] + "'; expected one of " + names_of(cur));
      cur = next;
      path += " " + next->get_name();
    }
    const bool help = i < argc && (std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help" ||
                                   std::string(argv[i]) == "--version");
    if (!help && cur->get_require_subcommand_min() > 0 && (i == argc || argv[i][0] == '-'))
      throw UsageError(path + ": expected a command, one of " + names_of(cur) + " (see " + path + " --help)");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    throw ConfigError(std::string(e.what()) + " (see gtrain --help)");
  }

  if (run_cmd->parsed()) {
    for (int i = 1; i < argc; ++i) run.argv.push_back(argv[i]);
    const RunOutcome out = run_job(run);
    if (out.launcher_exit >= 0) return out.launcher_exit;
    // A rank under gtrain's own mpirun says "resumable" through the outcome file and exits 0, so
    // mpirun ends quietly (a non-zero exit makes it print an abort notice); gtrain exits 3. Written
    // before MPI is finalised: a scheduler's TERM may have reached mpirun too, which then ends the
    // ranks, and the stage's checkpoint is committed already.
    const char* outcome = std::getenv("GTRAIN_INTERNAL_OUTCOME_FILE");
    const bool under_launcher = outcome && *outcome;
    if (out.summary.stopped_early && under_launcher && ProcessContext::get().rank == 0) {
      std::ofstream(outcome) << "resumable\n";
    }
    finish_run_process();
    if (!out.summary.stopped_early) return kExitOk;
    return under_launcher ? kExitOk : kExitResumable;
  }
  if (status_cmd->parsed()) {
    const int rc = status_command(status_dir, status_json);
    if (!status_json && chain_exists(status_dir)) print_chain_status(status_dir, system_command_runner(), std::cout);
    return rc;
  }
  if (submit_cmd->parsed()) {
    return submit_command(submit, process_environment(), system_command_runner(30.0), std::cout);
  }
  if (cancel_cmd->parsed()) {
    // A running stage's request is repeated until it confirms (a job just allocated may not have its
    // script up to take the first), for up to a minute.
    return cancel_command(cancel_dir, system_command_runner(30.0), std::cout, cancel_now, CancelRetry{60, 3});
  }
  if (step_cmd->parsed()) {
    std::cout << "gtrain chain: " << chain_step(step_dir, step_stage, step_exit, step_job, system_command_runner(30.0))
              << std::endl;
    return kExitOk;
  }
  if (exporter->parsed()) return ckpt_export_command(ckpt_export);
  if (ckpt_cmd->parsed())
    return inspect->parsed() ? ckpt_inspect_command(ckpt_path) : ckpt_verify_command(ckpt_path, verify_all);
  if (config_cmd->parsed()) {
    if (config_cmd->got_subcommand("reference")) {
      std::cout << reference_toml();
    } else {
      std::cout << to_toml(load_job_config(show_path, show_sets, process_environment()));
    }
    return kExitOk;
  }
  if (probe_cmd->parsed()) {
    return run_probe(probe, process_environment(), system_command_runner(), std::cout);
  }
  if (plan_cmd->parsed()) {
    return run_plan_command(plan, process_environment(), std::cout);
  }
  if (models_cmd->parsed()) {
    auto& reg = ModelRegistry::global();
    if (!plugin.empty()) reg.load_plugin(plugin);
    for (const auto& n : reg.names()) std::cout << n << "\n";
    return kExitOk;
  }
  return kExitUsage;
}

}  // namespace gtrain
