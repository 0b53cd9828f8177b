// train_commands.cpp: the training subcommands' flags and runs: run, config, probe, plan, models,
// sample, distill, sweep.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "launcher/base/program_runner.h"
#include "launcher/cli/commands.h"
#include "launcher/commands/plan_command.h"
#include "launcher/commands/probe_command.h"
#include "launcher/commands/sample_command.h"
#include "launcher/commands/sweep_command.h"
#include "launcher/launch/run_launch.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"

namespace gtrain {

Command add_run(CLI::App& app, int argc, char** argv, const LibTorchWork& work) {
  auto run = std::make_shared<RunOptions>();
  Command c;
  c.app = add_run_command(app, *run);
  c.run = [run, argc, argv, train = work.run] {
    for (int i = 1; i < argc; ++i) run->argv.push_back(argv[i]);
    return train(*run);
  };
  return c;
}

Command add_config(CLI::App& app) {
  struct State {
    std::string path;
    std::vector<std::string> sets;
  };
  auto st = std::make_shared<State>();
  Command c;
  c.app = app.add_subcommand("config", "Show configuration.");
  c.app->require_subcommand(1);
  auto* reference = c.app->add_subcommand("reference", "Print every key with its default and meaning.");
  auto* show = c.app->add_subcommand("show", "Print the resolved config (file + env + --set).");
  show->add_option("config", st->path, "TOML config file")->required();
  show->add_option("--set", st->sets, "Override a key: section.key=value")->allow_extra_args(false);
  c.run = [st, reference] {
    if (reference->parsed()) {
      std::cout << reference_toml();
    } else {
      std::cout << to_toml(load_job_config(st->path, st->sets, process_environment()));
    }
    return static_cast<int>(kExitOk);
  };
  return c;
}

Command add_probe(CLI::App& app) {
  auto probe = std::make_shared<ProbeOptions>();
  Command c;
  c.app = app.add_subcommand("probe",
                             "Show what the scheduler granted (nodes, GPUs, CPUs, time) and the limits that bind.");
  c.app->add_flag("--json", probe->json, "Print JSON instead of text");
  c.app->add_flag("!--no-limits", probe->read_limits, "Do not run squeue/scontrol/sacctmgr/qstat");
  c.run = [probe] { return run_probe(*probe, process_environment(), system_command_runner(), std::cout); };
  return c;
}

Command add_plan(CLI::App& app, const LibTorchWork& work) {
  auto plan = std::make_shared<PlanOptions>();
  Command c;
  auto* cmd = c.app = app.add_subcommand("plan",
                                         "Choose the parallel layout (dp/tp/pp, ZeRO 0-3, optimizer offload, "
                                         "recompute, micro-batch) for a config, "
                                         "with estimates, alternatives and a what-if table over GPU counts.");
  cmd->add_option("config", plan->config_path, "TOML config file (optional with --calibrate)");
  cmd->add_option("--set", plan->sets, "Override a key: section.key=value")->allow_extra_args(false);
  cmd->add_option("--gpus", plan->gpus,
                  "Plan for N GPUs, or for each of a list (1,2,4,8) or range (1-8) instead of what was granted")
      ->type_name("N|LIST");
  cmd->add_option("--ranks", plan->ranks,
                  "Plan for the N ranks gtrain run --ranks N starts here (CPU ranks share this machine's nodes)")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--nodes", plan->nodes, "Nodes the GPUs are spread over (default: 8 GPUs per node)")
      ->check(CLI::Validator(
          [](std::string& v) {
            return v.find_first_not_of("0123456789") == std::string::npos &&
                           v.find_first_not_of('0') != std::string::npos
                       ? std::string()
                       : "expected a node count >= 1, got '" + v + "'";
          },
          "N>=1"));
  cmd->add_option("--gpu-mem", plan->gpu_mem,
                  "Memory per GPU, its total as nvidia-smi reports it (plans use that less 1 GiB for the CUDA "
                  "context and NCCL), e.g. 80GiB, 40GB, 81920MiB")
      ->type_name("SIZE");
  cmd->add_option("--gpu-type", plan->gpu_type,
                  "GPU model for the rates: V100-32GB, A100-40GB, A100-80GB, "
                  "H100-80GB, H200, L40S");
  cmd->add_flag("--json", plan->json, "Print JSON instead of text");
  cmd->add_flag("--explain", plan->explain, "List every candidate and the estimate breakdown");
  cmd->add_flag(
      "--runnable", plan->runnable,
      "Only layouts gtrain run executes (today every layout the planner knows: dp with ZeRO 0-3 and optimizer "
      "offload, tp, pp, recompute)");
  cmd->add_flag("--calibrate", plan->calibrate,
                "Measure this machine (matmul rate, bandwidth) and save its "
                "profile for later plans");
  c.run = [plan, measure = work.measure_machine] {
    return run_plan_command(*plan, process_environment(), std::cout, measure);
  };
  return c;
}

Command add_models(CLI::App& app, const LibTorchWork& work) {
  auto plugin = std::make_shared<std::string>();
  Command c;
  c.app = app.add_subcommand("models", "List registered models.");
  c.app->add_option("--plugin", *plugin, "Also load this model plugin library");
  c.run = [plugin, model_names = work.model_names] {
    for (const auto& n : plugin->empty() ? builtin_model_names() : model_names(*plugin)) std::cout << n << "\n";
    // Not a registered model: model.name = "hf" takes gpt's or llama's shape from the Hugging Face
    // directory in checkpoint.init_from.
    std::cout << "hf\n";
    return static_cast<int>(kExitOk);
  };
  return c;
}

Command add_sample(CLI::App& app, const LibTorchWork& work) {
  auto o = std::make_shared<SampleOptions>();
  Command c;
  c.app = app.add_subcommand("sample", "Generate tokens from a trained gpt or llama (one device, key/value cache).");
  c.app
      ->add_option(
          "path", o->path,
          "Run, checkpoints or checkpoint directory (the newest checkpoint), or a Hugging Face model directory")
      ->required();
  c.app->add_option("--prompt-ids", o->prompt_ids, "The prompt as token ids: 1,2,3");
  c.app->add_option(
      "--prompt-text", o->prompt_text,
      "The prompt as text: through the run's tokenizer (data.tokenizer, or the Hugging Face directory's), "
      "or bytes for data.kind = text_bytes");
  c.app->add_option("--chat", o->chat,
                    "A question as a user turn in the chat template; prints the assistant's reply, "
                    "stopping at the end-of-turn token");
  c.app->add_option("--system", o->system, "With --chat: a system turn before the question");
  c.app->add_option("--chat-template", o->chat_template,
                    "With --chat: llama3, chatml, qwen3 or plain (default: the run's data.chat_template, "
                    "else the tokenizer_config.json's)");
  c.app->add_option("--tokenizer", o->tokenizer,
                    "A tokenizer.json or model directory (default: the run's or the model's)");
  c.app->add_option("--tokens", o->tokens, "Tokens to generate")->capture_default_str();
  c.app->add_option("--temperature", o->temperature, "Softmax temperature; 0 = greedy")->capture_default_str();
  c.app->add_option("--top-k", o->top_k, "Sample among the k most likely tokens (0 = all)")->capture_default_str();
  c.app->add_option("--seed", o->seed, "Seed of the sampling")->capture_default_str();
  c.app->add_flag("--json", o->json, "One JSON object: source, prompt, tokens (and text, with a tokenizer)");
  c.run = [o, sample = work.sample] { return sample(*o); };
  return c;
}

Command add_distill(CLI::App& app, int argc, char** argv, const LibTorchWork& work) {
  auto o = std::make_shared<DistillCacheOptions>();
  Command c;
  c.app = app.add_subcommand("distill", "Knowledge distillation's tools: the teacher's outputs cached once.");
  c.app->require_subcommand(1);
  auto* cache = c.app->add_subcommand(
      "cache",
      "Run distill.teacher once over the training split and store its top-k logits per token "
      "(distill.top_k, with the tail's mass) in distill.cache, for students to read instead of the teacher.");
  cache->add_option("config", o->config_path, "The student's TOML config ([data], model.seq_len, [distill])")
      ->required();
  cache->add_option("--set", o->sets, "Override a key: section.key=value")->allow_extra_args(false);
  cache->add_option("--out", o->out, "The cache folder (default: distill.cache)");
  cache->add_option("--ranks", o->ranks, "Ranks to start on this machine; each writes every N-th shard")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cache->add_option("--batch", o->batch, "Samples per teacher forward")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cache->add_flag("--quiet", o->quiet, "Errors only");
  c.run = [o, argc, argv, make = work.distill_cache] {
    for (int i = 1; i < argc; ++i) o->argv.push_back(argv[i]);
    return make(*o);
  };
  return c;
}

Command add_sweep(CLI::App& app) {
  auto o = std::make_shared<SweepCommandOptions>();
  Command c;
  c.app = app.add_subcommand("sweep",
                             "Search hyper-parameters: the trials of a sweep file's [search] (grid, random or ASHA) "
                             "as paused and resumed runs on the granted ranks; the same command continues it.");
  c.app->add_option("sweep", o->file, "The sweep file: a job config plus [search] (and [sweep])")->required();
  c.app->add_option("--set", o->sets, "Override a key of every trial's job: section.key=value")
      ->allow_extra_args(false);
  c.app->add_option("--dir", o->dir, "The sweep directory (default <log.root>/<log.name or the file's stem>)");
  c.app->add_option("--ranks", o->ranks, "Ranks (GPUs) for the trials (default: the granted GPUs, or 1 CPU rank)")
      ->check(CLI::Range(1, 65536));
  c.app->add_option(
      "--time-limit", o->time_limit,
      "Wall time of this sweep stage (90s, 15m, 2h, HH:MM:SS): the trials save and pause by then, exit 3");
  c.app->add_flag("--best", o->best, "Print the best trial's job as TOML (no training)");
  c.app->add_flag("--preview", o->preview,
                  "Rungs, runs, trial-steps, rank-hours from the planner's step time, and with "
                  "[[schedule.window]] when it finishes (no training)");
  c.app->add_flag("--quiet", o->quiet, "Only errors and the final line");
  c.run = [o] { return sweep_command(*o); };
  return c;
}

}  // namespace gtrain
