// job_commands.cpp: the job and checkpoint subcommands' flags and runs: status, submit, cancel,
// chain-step (for the batch scripts), ckpt inspect / verify / export.
#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <memory>

#include "launcher/base/program_runner.h"
#include "launcher/chain/chain.h"
#include "launcher/cli/commands.h"
#include "launcher/commands/ckpt_commands.h"
#include "launcher/commands/cluster_command.h"
#include "launcher/commands/report_command.h"
#include "launcher/commands/runs_command.h"
#include "launcher/commands/stage_commands.h"
#include "launcher/commands/submit_command.h"
#include "launcher/commands/sweep_command.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/schedule.h"

namespace gtrain {

namespace {

// --signal-lead: "0", seconds, or a duration ("2m"), rewritten as whole seconds for CLI11.
CLI::Validator signal_lead_validator() {
  return CLI::Validator(
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
      "DURATION");
}

}  // namespace

Command add_status(CLI::App& app) {
  struct State {
    std::string dir;
    bool json = false;
  };
  auto st = std::make_shared<State>();
  Command c;
  c.app = app.add_subcommand("status",
                             "Progress, stages, goodput and ETA of a run directory (a sweep directory: its trials).");
  c.app->add_option("run_dir", st->dir, "Run directory, or sweep directory")->required();
  c.app->add_flag("--json", st->json, "Machine-readable output");
  c.run = [st] {
    if (is_sweep_dir(st->dir)) {
      print_sweep_status(st->dir, st->json, std::cout);
      if (!st->json && chain_exists(st->dir)) print_chain_status(st->dir, system_command_runner(), std::cout);
      return 0;
    }
    const int rc = status_command(st->dir, st->json);
    if (!st->json && chain_exists(st->dir)) print_chain_status(st->dir, system_command_runner(), std::cout);
    return rc;
  };
  return c;
}

Command add_report(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  Command c;
  c.app = app.add_subcommand("report",
                             "What a run used and what it needs: curves, timeline, where the time went, GPU-hours "
                             "and cost, a resource request and advice (one self-contained HTML file, or Markdown).");
  c.app->add_option("run_dir", o->run_dir, "Run directory, or sweep directory (its trials, curves and best job)")
      ->required();
  c.app->add_option("-o,--output", o->output, "Output file (default <run dir>/report.html; - = stdout)");
  c.app->add_option("--format", o->format, "html, md or json (default: from the output's extension, else html)")
      ->check(CLI::IsMember({"html", "md", "markdown", "json"}));
  c.app
      ->add_option("--price-per-gpu-hour", o->price,
                   "Price of a GPU-hour (CPU runs: a rank-hour) for the cost "
                   "(default log.price_per_gpu_hour)")
      ->check(CLI::Range(0.0, 1e9));
  c.app->add_flag("--no-cluster", o->no_cluster,
                  "Do not ask a submitted run's scheduler for its cluster's facts (quiet windows, quotas left): "
                  "use those cluster.json keeps");
  c.run = [o] { return run_report_command(*o, process_environment()); };
  return c;
}

Command add_runs(CLI::App& app) {
  auto o = std::make_shared<RunsOptions>();
  auto diff = std::make_shared<std::vector<std::string>>();
  Command c;
  c.app = app.add_subcommand("runs",
                             "List runs: identity, status, stages, steps, best eval loss, GPU-hours, where; a run "
                             "repeating a finished one is marked. `runs diff A B`: what differs between two runs.");
  c.app->add_option("dirs", o->dirs, "Run directories, or folders holding them (default runs/)");
  c.app->add_flag("--json", o->json, "One JSON array instead of the table");
  auto* d =
      c.app->add_subcommand("diff", "What differs between two runs: config, data, initial weights, layout, gtrain");
  d->add_option("runs", *diff, "Two run directories")->required()->expected(2);
  c.run = [o, diff, d] { return d->parsed() ? run_runs_diff_command(diff->at(0), diff->at(1)) : run_runs_command(*o); };
  return c;
}

Command add_submit(CLI::App& app) {
  auto submit = std::make_shared<SubmitOptions>();
  Command c;
  auto* cmd = c.app = app.add_subcommand("submit",
                                         "Write Slurm/PBS batch scripts into the run directory and submit them "
                                         "as a chain of stages that resume each other.");
  cmd->add_option("config", submit->config_path, "TOML config file")->required();
  cmd->add_option("--set", submit->sets, "Override a key (passed on to gtrain run)")->allow_extra_args(false);
  cmd->add_option("--run-dir", submit->run_dir, "Run directory (default <log.root>/<log.name>)");
  cmd->add_option("--scheduler", submit->scheduler, "slurm or pbs");
  cmd->add_flag("--dry-run", submit->dry_run, "Write the scripts and print the commands; submit nothing");
  cmd->add_flag("--sweep", submit->sweep,
                "The config is a sweep file: each stage runs as much of gtrain sweep as it is given, its "
                "trials saved at the stop; the run directory is the sweep's");
  cmd->add_flag("--force", submit->force,
                "Passed on to gtrain run: train even when a finished run beside this one has its identity");
  cmd->add_option("--stages", submit->stages, "auto (one more stage while resumable) or a fixed number");
  cmd->add_option("--gpus", submit->gpus,
                  "GPUs per stage, or one count per stage with --stages N (2,4,1); or open: auto, a range (2-8) "
                  "or a list with --stages auto (1,2,4,8), each stage submitted at the count that finishes first "
                  "(sbatch --test-only's start + the planner's run time); default: the quota window's max_gpus, "
                  "else 1, and at least one a node")
      ->type_name("N|LIST|auto|MIN-MAX");
  cmd->add_option("--objective", submit->objective,
                  "Open --gpus: finish (the earliest predicted finish) or gpu-hours (the fewest GPU-hours whose "
                  "finish is within --slack of the earliest)")
      ->check(CLI::IsMember({"finish", "gpu-hours"}));
  cmd->add_option("--slack", submit->slack,
                  "--objective gpu-hours: the share of the earliest time to finish a "
                  "size may add (default 0.1)")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--nodes", submit->nodes, "Nodes per stage (default 1), or one count per stage")->type_name("N|LIST");
  cmd->add_option("--time", submit->time,
                  "Time limit of each stage (2h, 90m, 1h30m, HH:MM:SS, or Slurm's MM, MM:SS, D-HH, D-HH:MM, "
                  "D-HH:MM:SS; a plain number is minutes, as for sbatch); auto: the largest GPUs x time the "
                  "scheduler would start now (backfill), from at most 20 test submissions, or, when jobs "
                  "pending ahead make none start now, from the GPUs free now and their planned starts");
  cmd->add_option("--partition", submit->partition, "Partition (PBS: queue)");
  cmd->add_option("--account", submit->account,
                  "Account to charge; auto: per stage, the one you may charge that starts it earliest within its "
                  "quota (sbatch --test-only for each)");
  cmd->add_option("--qos", submit->qos, "Quality of service; auto: as --account auto, over the QOS you may use");
  cmd->add_option("--when", submit->when,
                  "now (default), or quiet: a stage whose GPUs are seldom free at its predicted start begins at "
                  "the partition's next quiet hour (from the accounting's history; gtrain cluster shows them)")
      ->check(CLI::IsMember({"now", "quiet"}));
  cmd->add_option("--deadline", submit->deadline,
                  "--when quiet delays no stage so far that the chain would end after this (2026-12-10T08:00, "
                  "or a duration from now: 3d)");
  cmd->add_option("--sbatch-arg", submit->sbatch_args, "Extra directive, e.g. --constraint=a100 (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--signal-lead", submit->signal_lead_s,
                  "Slurm: seconds before the limit USR1 is sent (default, or 0: measured save time x safety + "
                  "margin + 30). PBS: gtrain run's own deadline this long before the walltime (default 30; "
                  "it saves ahead of it). Seconds, or a duration such as 2m")
      ->transform(signal_lead_validator());
  cmd->add_option("--launcher", submit->launcher, "How the job starts ranks: mpirun (default) or srun");
  cmd->add_option("--cpus-per-gpu", submit->cpus_per_gpu,
                  "CPU cores to request per GPU (Slurm --cpus-per-gpu, PBS ncpus); default 0: the site's default, "
                  "which on some sites is one core per task")
      ->check(CLI::Range(0, 1024));
  c.run = [submit] { return submit_command(*submit, process_environment(), system_command_runner(30.0), std::cout); };
  return c;
}

Command add_cluster(CLI::App& app) {
  auto o = std::make_shared<ClusterOptions>();
  Command c;
  auto* cmd = c.app = app.add_subcommand(
      "cluster",
      "What the cluster allows and when it is quiet: binding limits, free GPUs and queue waits by hour of "
      "the week from the accounting's history, quotas and their burn-down, and a job's expected start");
  cmd->add_option("--scheduler", o->scheduler, "slurm or pbs");
  cmd->add_option("--partition", o->partition, "Only this partition (default: every one, the default first)");
  cmd->add_option("--weeks", o->weeks, "Weeks of history to learn from (default 4)");
  cmd->add_flag("--json", o->json, "Everything as one JSON object");
  cmd->add_flag("--predict", o->predict, "The expected start of a job of --gpus N and --time T submitted now");
  cmd->add_option("--gpus", o->gpus,
                  "The job size quiet windows and predictions are for (default: 3/4 of a partition)");
  cmd->add_option("--time", o->time,
                  "The job's time limit for --predict (2h, 90m, HH:MM:SS; a plain number is minutes)");
  cmd->add_option("--quota-hours", o->quota_hours,
                  "A GPU-hour quota the site keeps outside the scheduler: its burn-down from your jobs");
  cmd->add_option("--quota-since", o->quota_since, "When that quota's period began, YYYY-MM-DD (default: the 1st)");
  cmd->add_option("--user", o->user, "Whose quotas (default: $USER)");
  c.run = [o] { return cluster_command(*o, process_environment(), system_command_runner(30.0), std::cout); };
  return c;
}

Command add_cancel(CLI::App& app) {
  struct State {
    std::string dir;
    bool now = false;
  };
  auto st = std::make_shared<State>();
  Command c;
  c.app = app.add_subcommand("cancel",
                             "Cancel a submitted chain: queued stages go, the running one saves and exits 3 first.");
  c.app->add_option("run_dir", st->dir, "Run directory")->required();
  c.app->add_flag("--now", st->now,
                  "Cancel the running stage outright (the scheduler's TERM, then KILL after its grace time): "
                  "its ranks still save if they can before the KILL");
  // A running stage's request is repeated until it confirms (a job just allocated may not have its
  // script up to take the first), for up to a minute.
  c.run = [st] { return cancel_command(st->dir, system_command_runner(30.0), std::cout, st->now, CancelRetry{60, 3}); };
  return c;
}

// Called by the generated batch scripts, not by people: hidden from --help.
Command add_chain_step(CLI::App& app) {
  struct State {
    std::string dir, job;
    int stage = 0, exit = 0;
  };
  auto st = std::make_shared<State>();
  Command c;
  c.app = app.add_subcommand("chain-step", "(batch scripts) report a stage's exit code to its chain");
  c.app->group("");
  c.app->add_option("run_dir", st->dir)->required();
  c.app->add_option("--stage", st->stage)->required();
  c.app->add_option("--exit", st->exit)->required();
  c.app->add_option("--job", st->job);
  c.run = [st] {
    std::cout << "gtrain chain: " << chain_step(st->dir, st->stage, st->exit, st->job, system_command_runner(30.0))
              << std::endl;
    return static_cast<int>(kExitOk);
  };
  return c;
}

Command add_ckpt(CLI::App& app, const LibTorchWork& work) {
  struct State {
    std::string path;
    bool verify_all = false;
    CkptExportOptions exporting;
  };
  auto st = std::make_shared<State>();
  Command c;
  c.app = app.add_subcommand("ckpt", "Inspect, verify or export a checkpoint.");
  c.app->require_subcommand(1);
  const char* path_help = "Checkpoint directory (or a run / checkpoints directory: the newest)";
  auto* inspect = c.app->add_subcommand("inspect", "Print a checkpoint's manifest summary.");
  inspect->add_option("path", st->path, path_help)->required();
  auto* verify = c.app->add_subcommand("verify", "Check every piece's size and CRC32; exit 1 on a problem.");
  verify->add_option("path", st->path, path_help)->required();
  verify->add_flag("--all", st->verify_all, "Check every kept checkpoint of the directory, not only the newest");
  auto* exporter = c.app->add_subcommand(
      "export",
      "Write the model's full weights (any layout's checkpoint) to one .safetensors file, or with --format hf "
      "to a Hugging Face model directory; a LoRA run's adapters with --format peft, or merged into its base with "
      "--format hf --merge.");
  exporter->add_option("path", st->exporting.path, path_help)->required();
  exporter
      ->add_option("out", st->exporting.out,
                   "The .safetensors file to write (replaced if it exists); --format hf: the directory (an earlier "
                   "export there is replaced)")
      ->required();
  exporter
      ->add_option(
          "--format", st->exporting.format,
          "safetensors (one file, gtrain's tensor names), hf (config.json and model*.safetensors that "
          "transformers' from_pretrained loads: GPT-2 for gpt; Llama, Qwen2 or Qwen3 for llama), or peft "
          "(a LoRA run's adapter_config.json and adapter_model.safetensors for peft.PeftModel.from_pretrained)")
      ->capture_default_str();
  exporter->add_flag("--merge", st->exporting.merge,
                     "--format hf of a LoRA run: the base model (checkpoint.init_from, checked against the hash the "
                     "checkpoint recorded) with each adapter folded in, W + alpha / rank x B A");
  exporter
      ->add_option("--max-shard-size", st->exporting.max_shard_size,
                   "--format hf: tensor bytes per file (5GB, 500MB, 2GiB, ...); more go in shards with "
                   "model.safetensors.index.json")
      ->capture_default_str();
  exporter
      ->add_option("--dtype", st->exporting.dtype,
                   "stored (the checkpoint's fp32 master weights), float32, bfloat16 or float16 (or fp32, bf16, "
                   "fp16, as precision.dtype spells them)")
      ->capture_default_str();
  exporter->add_flag("--optimizer", st->exporting.optimizer,
                     "Also the optimizer's state (exp_avg, exp_avg_sq, momentum_buffer, optimizer.step)");
  c.run = [st, inspect, exporter, verify = work.ckpt_verify, export_to = work.ckpt_export] {
    if (exporter->parsed()) return export_to(st->exporting);
    return inspect->parsed() ? ckpt_inspect_command(st->path) : verify(st->path, st->verify_all);
  };
  return c;
}

}  // namespace gtrain
