// test_plan_cli.cpp: `gtrain probe` and `gtrain plan` end to end through the binary, with fake
// squeue/scontrol/sacctmgr programs on PATH replaying recorded output; bad flags exit 2 with one line.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/test_util.h"

namespace gtrain {
namespace {

using test::run_command;

// A clean environment (nothing from a scheduler the tests may run under) plus `vars`; `path`
// replaces PATH, so only the fake scheduler programs are found.
std::string clean_env(const std::string& vars, const std::string& path_prefix = "") {
  return "env -i PATH=" + (path_prefix.empty() ? std::string("/usr/bin:/bin") : path_prefix) + " HOME=/nonexistent " +
         vars + " ";
}

void write_script(const std::string& path, const std::string& body) {
  test::write_file(path, "#!/bin/sh\n" + body);
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

// Fake Slurm client commands printing what a real cluster printed.
void fake_slurm(const test::TempDir& dir) {
  write_script(dir.file("squeue"), "echo 2024-05-01T14:30:00\n");
  write_script(dir.file("scontrol"),
               "case \"$2\" in\n"
               "job) echo 'JobId=4242 JobName=train UserId=alice(1001) Account=proj QOS=normal JobState=RUNNING "
               "TimeLimit=04:00:00 StartTime=2024-05-01T10:30:00 EndTime=2024-05-01T14:30:00 Partition=gpu "
               "NodeList=gpu[01-02] NumNodes=2 TRES=cpu=16,mem=128G,node=2,billing=16,gres/gpu=2 "
               "TresPerNode=gres/gpu:a100:1' ;;\n"
               "partition) echo 'PartitionName=gpu AllowGroups=ALL QoS=N/A DefaultTime=01:00:00 MaxNodes=4 "
               "MaxTime=2-00:00:00 State=UP TotalNodes=16' ;;\n"
               "*) exit 1 ;;\n"
               "esac\n");
  write_script(dir.file("sacctmgr"),
               "case \"$*\" in\n"
               "*qos*) printf 'normal|2-00:00:00|gres/gpu=2|gres/gpu=4|\\n' ;;\n"
               "*assoc*) printf 'proj|||gres/gpu=16||\\nproj|alice||gres/gpu=8||12:00:00\\n' ;;\n"
               "*) exit 1 ;;\n"
               "esac\n");
}

const std::string kSlurmVars =
    "SLURM_JOB_ID=4242 SLURM_JOB_NODELIST='gpu[01-02]' SLURMD_NODENAME=gpu01 SLURM_GPUS_PER_NODE=1 "
    "SLURM_JOB_GPUS=0 SLURM_NTASKS=2 SLURM_TASKS_PER_NODE='1(x2)' SLURM_JOB_CPUS_PER_NODE='8(x2)' "
    "SLURM_JOB_PARTITION=gpu SLURM_JOB_ACCOUNT=proj SLURM_JOB_QOS=normal SLURM_JOB_USER=alice";

TEST(ProbeCli, JsonFromSlurmWithRecordedLimits) {
  test::TempDir dir;
  fake_slurm(dir);
  auto r = run_command(clean_env(kSlurmVars, dir.path()) + GTRAIN_BINARY + " probe --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("scheduler"), "slurm");
  EXPECT_EQ(j.at("job_id"), "4242");
  EXPECT_EQ(j.at("nodelist"), "gpu[01-02]");
  EXPECT_EQ(j.at("total_gpus"), 2);
  EXPECT_EQ(j.at("world_size"), 2);
  EXPECT_EQ(j.at("time_limit_s"), 14400);
  EXPECT_TRUE(j.at("end_time_unix").is_number());
  EXPECT_EQ(j.at("partition"), "gpu");
  ASSERT_TRUE(j.at("limits").is_array());
  bool qos_binds = false, partition_time = false;
  for (const auto& l : j.at("limits")) {
    if (l.at("scope") == "QOS normal" && l.at("name") == "MaxTRESPerJob gres/gpu") qos_binds = l.at("binds");
    if (l.at("scope") == "partition gpu" && l.at("name") == "MaxTime") {
      partition_time = l.at("value") == "2-00:00:00" && !l.at("binds");
    }
  }
  EXPECT_TRUE(qos_binds) << r.output;
  EXPECT_TRUE(partition_time) << r.output;

  // The text form says the same, marking what binds.
  r = run_command(clean_env(kSlurmVars, dir.path()) + GTRAIN_BINARY + " probe");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("slurm job 4242 on 2 nodes (gpu[01-02])"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("* QOS normal"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("limit 04:00:00"), std::string::npos) << r.output;
}

TEST(ProbeCli, WithoutSchedulerProgramsLimitsStayUnknown) {
  auto r = run_command(clean_env(kSlurmVars, "/nonexistent-bin") + GTRAIN_BINARY + " probe --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_TRUE(j.at("end_time_unix").is_null());
  for (const auto& l : j.at("limits")) EXPECT_EQ(l.at("value"), "unknown") << l.dump();
}

TEST(ProbeCli, MalformedVariableIsOneLineExitTwo) {
  auto r = run_command(clean_env("SLURM_JOB_ID=1 SLURM_JOB_NODELIST='gpu[01-'") + GTRAIN_BINARY + " probe");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(test::lines(r.output).size(), 1u) << r.output;
  EXPECT_NE(r.output.find("SLURM_JOB_NODELIST='gpu[01-'"), std::string::npos) << r.output;
  r = run_command(clean_env("CUDA_VISIBLE_DEVICES=0,x") + GTRAIN_BINARY + " probe --json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("CUDA_VISIBLE_DEVICES='0,x'"), std::string::npos) << r.output;
}

const char* kGpt2 = R"(
[model]
name = "gpt"
n_layer = 12
n_head = 12
n_embd = 768
seq_len = 1024
vocab = 50257
[data]
kind = "synthetic"
[train]
global_batch = 512
tokens = 10000000000
[precision]
dtype = "bf16"
)";

const char* kHuge = R"(
[model]
name = "gpt"
n_layer = 96
n_head = 96
n_embd = 12288
seq_len = 2048
vocab = 50257
[data]
kind = "synthetic"
[train]
global_batch = 1024
steps = 1000
[precision]
dtype = "bf16"
)";

TEST(PlanCli, Gpt2On8x80GBJson) {
  test::TempDir dir;
  test::write_file(dir.file("gpt2.toml"), kGpt2);
  auto r = run_command(clean_env("") + GTRAIN_BINARY + " plan " + dir.file("gpt2.toml") +
                       " --gpus 8 --gpu-mem 80GiB --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const auto& c = j.at("chosen");
  EXPECT_EQ(c.at("dp"), 8);
  EXPECT_EQ(c.at("tp"), 1);
  EXPECT_EQ(c.at("pp"), 1);
  EXPECT_EQ(c.at("offload"), "none");  // the ZeRO stage: whichever is fastest (test_planner.cpp)
  EXPECT_EQ(c.at("global_batch"), 512);
  // --gpu-mem is the card's total: usable is 1 GiB less (CUDA context, NCCL), and the chosen layout
  // keeps parallel.memory_margin (5%) of its estimate free.
  EXPECT_EQ(j.at("usable_memory_bytes").get<double>(), 79.0 * (1 << 30));
  EXPECT_EQ(j.at("memory_margin").get<double>(), 0.05);
  EXPECT_LE(c.at("memory_bytes").get<double>() * 1.05, 79.0 * (1 << 30));
  EXPECT_EQ(j.at("hardware").at("name"), "A100-80GB");
  EXPECT_EQ(j.at("steps"), 19074);  // 10e9 tokens / (512 x 1024) rounded up
  // Alternatives carry why they lost; infeasible ones the constraint.
  bool slower = false, heads = false;
  for (const auto& x : j.at("candidates")) {
    const std::string why = x.at("why");
    slower |= x.at("feasible").get<bool>() && why.rfind("slower", 0) == 0;
    heads |= why.find("does not divide the 12 attention heads") != std::string::npos;
  }
  EXPECT_TRUE(slower);
  EXPECT_TRUE(heads);
  // What-if: time per step falls as GPUs are added; GPU-hours are reported.
  const auto& w = j.at("what_if");
  ASSERT_GE(w.size(), 4u);
  double last = 1e30;
  for (const auto& row : w) {
    ASSERT_TRUE(row.at("feasible").get<bool>()) << row.dump();
    EXPECT_LT(row.at("step_seconds").get<double>(), last);
    last = row.at("step_seconds");
    EXPECT_GT(row.at("gpu_hours").get<double>(), 0);
  }
}

// Issue 25: for the examples' configs every count from 1 to 8 GPUs has a layout that keeps the
// global batch (none refused because dp does not divide it); 3, 5, 6 and 7 split it unevenly.
TEST(PlanCli, EveryCountOneToEightHasALayoutForTheExamples) {
  for (const std::string example : {"gpt_bytes.toml", "quickstart.toml", "llama_tiny.toml"}) {
    const std::string path = std::string(GTRAIN_SOURCE_DIR) + "/examples/" + example;
    auto r = run_command("cd " + std::string(GTRAIN_SOURCE_DIR) + " && " + clean_env("") + GTRAIN_BINARY + " plan " +
                         path + " --gpus 1-8 --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    const int64_t batch = j.at("global_batch");
    const auto& w = j.at("what_if");
    ASSERT_EQ(w.size(), 8u) << example;
    for (size_t i = 0; i < w.size(); ++i) {
      const auto& row = w[i];
      EXPECT_EQ(row.at("gpus"), static_cast<int64_t>(i + 1));
      ASSERT_TRUE(row.at("feasible").get<bool>()) << example << ": " << row.dump();
      EXPECT_EQ(row.at("plan").at("global_batch"), batch) << example << ": " << row.dump();
      EXPECT_EQ(row.at("plan").at("world"), static_cast<int64_t>(i + 1)) << example << ": " << row.dump();
    }
    EXPECT_EQ(w[2].at("plan").at("dp"), 3) << example;
    EXPECT_NE(w[2].at("plan").at("replica_shares").get<std::string>().find(", "), std::string::npos) << example;
  }
}

// Issue 26: a preset is sized from its shape without building it: Llama-3.1-8B's 8.03B parameters,
// 8 key/value heads and SwiGLU width in the table and the JSON, and a layout that fits 8 x 80 GB
// (too big for data parallel alone: fp32 weights, gradients and Adam need 128 GB).
TEST(PlanCli, LlamaPresetIsSizedFromItsShape) {
  test::TempDir dir;
  test::write_file(dir.file("l8b.toml"),
                   "[model]\npreset = \"llama-3.1-8b\"\n[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = "
                   "64\nsteps = 1000\n");
  const std::string cmd = clean_env("") + GTRAIN_BINARY + " plan " + dir.file("l8b.toml") + " --gpus 8 --gpu-mem 80GiB";
  auto text = run_command(cmd);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("llama: 8030.3M params, 32 blocks, 32 heads over 8 key/value heads, MLP 14336 (SwiGLU), "
                             "vocabulary 128256"),
            std::string::npos)
      << text.output;
  auto r = run_command(cmd + " --json");
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("model").at("params"), 8030261248);
  EXPECT_EQ(j.at("model").at("kv_heads"), 8);
  const auto& chosen = j.at("chosen");
  EXPECT_TRUE(chosen.at("tp").get<int64_t>() > 1 || chosen.at("pp").get<int64_t>() > 1 ||
              chosen.at("zero").get<int64_t>() > 0)
      << chosen.dump();
  EXPECT_LE(chosen.at("memory_bytes").get<double>(), 80.0 * (1 << 30)) << chosen.dump();
}

// Llama-3.1-8B on 2 x 80 GiB: only sharded parameters or an offloaded optimizer fit (16 B/param of
// fp32 weights, gradients and AdamW moments is 120 GiB), and the plan says so; on 1 GPU the offload
// plan, or exactly how much is missing.
TEST(PlanCli, Llama8bFitsTwoGpusWithZero3OrOffload) {
  test::TempDir dir;
  test::write_file(dir.file("l8b.toml"),
                   "[model]\npreset = \"llama-3.1-8b\"\n[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = "
                   "16\nsteps = 1000\n[precision]\ndtype = \"bf16\"\n");
  const std::string cmd = clean_env("") + GTRAIN_BINARY + " plan " + dir.file("l8b.toml") + " --gpu-mem 80GiB";
  auto two = run_command(cmd + " --gpus 2 --json");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto j2 = nlohmann::json::parse(two.output.substr(0, two.output.rfind('}') + 1));
  const auto& c2 = j2.at("chosen");
  ASSERT_FALSE(c2.is_null()) << two.output;
  EXPECT_TRUE(c2.at("zero").get<int64_t>() == 3 || c2.at("offload") == "optimizer" || c2.at("tp").get<int64_t>() > 1)
      << c2.dump();
  EXPECT_LE(c2.at("memory_bytes").get<double>(), 80.0 * (1 << 30)) << c2.dump();
  // No unsharded layout fits: every zero 0-2 candidate without offload or tp is over memory.
  for (const auto& c : j2.at("candidates")) {
    if (c.at("tp") == 1 && c.at("pp") == 1 && c.at("zero").get<int64_t>() < 3 && c.at("offload") == "none" &&
        c.at("world") == 2) {
      EXPECT_FALSE(c.at("feasible").get<bool>()) << c.dump();
    }
  }
  auto text = run_command(cmd + " --gpus 2");
  EXPECT_NE(text.output.find("least time per global batch"), std::string::npos) << text.output;
  auto one = run_command(cmd + " --gpus 1");
  if (one.exit_code == 0) {
    EXPECT_NE(one.output.find("offload=optimizer"), std::string::npos) << one.output;
    EXPECT_NE(one.output.find("offloaded to host memory"), std::string::npos) << one.output;
  } else {
    EXPECT_NE(one.output.find("over memory by"), std::string::npos) << one.output;
  }
}

// Issue 47: the README's 8B plan. 16 x H100 chooses the fastest layout (dp16 ZeRO-3, 5.369 s/step,
// not dp8 tp2 ZeRO-1 at 5.516 s and 24 GiB more); the alternatives are in the order their header
// states, none "as fast" with a negative size; offload is written "offload" (not "off", which read
// as "recompute off"); usable memory is the card's total less the CUDA context and NCCL.
TEST(PlanCli, ReadmeLlama8BPlanChoosesTheFastestAndSaysWhyRight) {
  const std::string cmd = "cd " + std::string(GTRAIN_SOURCE_DIR) + " && " + clean_env("") + GTRAIN_BINARY +
                          " plan examples/llama_tiny.toml --set model.preset=llama-3.1-8b --set model.seq_len=2048 "
                          "--set precision.dtype=bf16 --set train.global_batch=256 --set train.steps=1000 "
                          "--gpus 1,2,4,8,16 --gpu-type H100-80GB";
  auto r = run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string& out = r.output;
  EXPECT_NE(out.find("chosen for 16 GPUs (the largest of --gpus 1,2,4,8,16; the table below plans each count): "
                     "dp=16 tp=1 pp=1 zero=3"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("78.65 GiB usable per GPU (79.65 GiB total less 1.00 GiB for the CUDA context and NCCL)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("with the 5% memory margin"), std::string::npos) << out;
  EXPECT_FALSE(std::regex_search(out, std::regex("-[0-9.]+ ?[KMGT]i?B more"))) << out;
  // The alternatives: s/step rising, a layout that leaves GPUs idle counted 5% slower.
  const auto at = out.find("\nalternatives (by s/step; one that leaves GPUs idle counts 5% slower");
  ASSERT_NE(at, std::string::npos) << out;
  std::istringstream lines(out.substr(at + 1));
  std::string line;
  std::getline(lines, line);  // the header
  std::getline(lines, line);  // the column names
  double last = 0;
  int rows = 0;
  std::smatch m;
  while (std::getline(lines, line) && !line.empty()) {
    ASSERT_TRUE(std::regex_search(line, m, std::regex(R"(^\s+\d+\s+(.+?)\s+([0-9.]+)\s+([0-9.]+)\s+(\S.*)$)"))) << line;
    const double ranked = std::stod(m[3]) * (m[1].str().find("(uses") != std::string::npos ? 1.05 : 1.0);
    EXPECT_GE(ranked, last * (1 - 1e-3)) << line;
    last = ranked;
    ++rows;
  }
  EXPECT_GE(rows, 5);
  // Offload is "offload" in every row; "off" alone appears in none.
  EXPECT_NE(out.find(" offload"), std::string::npos) << out;
  EXPECT_FALSE(std::regex_search(out, std::regex(R"((mb\S+| rc) off( |\n))"))) << out;
  auto help = run_command(clean_env("") + GTRAIN_BINARY + " plan --help");
  EXPECT_NE(help.output.find("ZeRO 0-3"), std::string::npos) << help.output;
  EXPECT_EQ(help.output.find("ZeRO 1-2"), std::string::npos) << help.output;
}

// --gpus 6 (6 on one node): the what-if table's other counts fill nodes of 8, the default, not of 6.
TEST(PlanCli, WhatIfRowsFillNodesOfEight) {
  test::TempDir dir;
  test::write_file(dir.file("gpt2.toml"), kGpt2);
  auto r = run_command(clean_env("") + GTRAIN_BINARY + " plan " + dir.file("gpt2.toml") +
                       " --gpus 6 --gpu-mem 80GiB --json");
  const auto j = nlohmann::json::parse(r.output.substr(0, r.output.rfind('}') + 1));
  std::map<int64_t, int64_t> nodes;
  for (const auto& row : j.at("what_if")) nodes[row.at("gpus").get<int64_t>()] = row.at("nodes").get<int64_t>();
  ASSERT_EQ(nodes.count(16), 1u) << r.output;
  EXPECT_EQ(nodes.at(6), 1);
  EXPECT_EQ(nodes.at(8), 1);
  EXPECT_EQ(nodes.at(16), 2);  // was 3: nodes of 6
}

TEST(PlanCli, TextWithListOfCountsAndExplain) {
  test::TempDir dir;
  test::write_file(dir.file("gpt2.toml"), kGpt2);
  auto r = run_command(clean_env("") + GTRAIN_BINARY + " plan " + dir.file("gpt2.toml") +
                       " --gpus 1,2,4,8 --gpu-type h100 --explain");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The chosen block says which of the counts it is for.
  EXPECT_NE(r.output.find("\nchosen for 8 GPUs (the largest of --gpus 1,2,4,8; the table below plans each count): "
                          "dp=8 tp=1 pp=1 zero=0"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("profile   H100-80GB (table)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("why it lost"), std::string::npos);
  EXPECT_NE(r.output.find("activations     per sample"), std::string::npos) << "--explain adds the breakdown";
  const auto table = r.output.substr(r.output.find("what-if"));
  EXPECT_EQ(test::lines(table).size(), 2u + 4u) << table;  // title, header, 4 counts
}

const char* kSmallMlp =
    "[model]\nname = \"mlp\"\nhidden = [32]\n[data]\nkind = \"synthetic\"\nsynthetic_samples = 256\n"
    "[train]\nglobal_batch = 16\nsteps = 10\n";

// CPU ranks go where gtrain run --ranks N puts them: all on this machine, sharing its memory; the
// what-if table over rank counts says one node for each.
TEST(PlanCli, CpuRanksShareThisMachine) {
  test::TempDir dir;
  test::write_file(dir.file("mlp.toml"), kSmallMlp);
  const std::string plan = clean_env("") + GTRAIN_BINARY + " plan " + dir.file("mlp.toml");
  auto r = run_command(plan + " --ranks 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto two = nlohmann::json::parse(r.output);
  EXPECT_EQ(two.at("unit"), "rank");
  EXPECT_EQ(two.at("world"), 2);
  EXPECT_EQ(two.at("nodes"), 1);
  EXPECT_EQ(two.at("gpus_per_node"), 2);
  EXPECT_EQ(two.at("chosen").at("dp"), 2);
  ASSERT_GE(two.at("what_if").size(), 4u);
  for (const auto& row : two.at("what_if")) EXPECT_EQ(row.at("nodes"), 1) << row.dump();
  r = run_command(plan + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto one = nlohmann::json::parse(r.output);
  EXPECT_EQ(one.at("world"), 1);
  for (const auto& row : one.at("what_if")) EXPECT_EQ(row.at("nodes"), 1) << row.dump();  // was one node per rank
  // Two ranks share the memory one rank has alone.
  const double ratio = two.at("usable_memory_bytes").get<double>() / one.at("usable_memory_bytes").get<double>();
  EXPECT_GT(ratio, 0.45);
  EXPECT_LT(ratio, 0.55);

  r = run_command(plan + " --ranks 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("  devices   2 ranks (granted: local, 2 ranks as configured (--ranks)), 2 per node\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\nchosen: dp=2 tp=1 pp=1"), std::string::npos) << r.output;
  const auto table = test::lines(r.output.substr(r.output.find("what-if over rank counts")));
  ASSERT_GE(table.size(), 4u) << r.output;
  EXPECT_EQ(table[3].substr(0, 15), "       2      1") << table[3];  // 2 ranks on 1 node

  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--ranks 2 --gpus 4",
            "gtrain: config error: --ranks 2 plans the ranks gtrain run --ranks 2 starts here, --gpus 4 GPUs "
            "elsewhere; hint: give one of them"},
           {"--ranks 0", "gtrain: config error: --ranks: Value 0 not in range 1 to 65536; hint: see gtrain --help"}}) {
    r = run_command(plan + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_EQ(r.output, message + "\n") << flags;
  }
}

TEST(PlanCli, ModelThatCannotFitPrintsTheTableThenOneErrorLine) {
  test::TempDir dir;
  test::write_file(dir.file("huge.toml"), kHuge);
  auto r = run_command("{ " + clean_env("") + GTRAIN_BINARY + " plan " + dir.file("huge.toml") +
                       " --gpus 8 --gpu-type A100-40GB 2>" + dir.file("err") + "; }");
  EXPECT_EQ(r.exit_code, 2);
  const std::string err = test::read_file(dir.file("err"));
  EXPECT_EQ(test::lines(err).size(), 1u) << err;
  EXPECT_NE(err.find("39.0 GiB usable"), std::string::npos) << err;  // 40 GiB less the CUDA context and NCCL
  EXPECT_NE(err.find("GiB missing"), std::string::npos) << err;
  EXPECT_NE(r.output.find("what-if over GPU counts"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not fit: needs"), std::string::npos) << r.output;
}

TEST(PlanCli, BadFlagsExitTwoNamingTheFlag) {
  test::TempDir dir;
  test::write_file(dir.file("gpt2.toml"), kGpt2);
  const std::string base = clean_env("") + GTRAIN_BINARY + " plan " + dir.file("gpt2.toml");
  for (const auto& [flags, needle] : std::vector<std::pair<std::string, std::string>>{
           {"--gpus 0", "--gpus '0'"},
           {"--gpus 1,,2", "--gpus '1,,2'"},
           {"--gpus 8 --gpu-mem 80XB", "--gpu-mem '80XB'"},
           {"--gpus 8 --nodes 3", "--nodes 3 must divide the GPU count 8"},
           {"--gpus 8 --nodes 0", "--nodes: expected a node count >= 1, got '0'"},
           {"--gpus 1,2,2", "--gpus '1,2,2': 2 is listed twice"},
           {"--gpus 8 --gpu-type tpu-v5", "--gpu-type 'tpu-v5': unknown GPU"},
           {"--gpus 8 --set parallel.mode=explicit --set parallel.tp=5",
            "tp = 5 must divide the 12 attention heads"}}) {
    auto r = run_command(base + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_EQ(test::lines(r.output).size(), 1u) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << flags << "\n" << r.output;
  }
}

// A run keeps the planner's estimate beside each measured step (est_step_s) and says once when the
// settled median is more than 25% away from it: here a saved profile claims 1000x this CPU's rate.
TEST(PlanCli, RunSaysOnceWhenTheStepEstimateIsFarOff) {
  test::TempDir dir;
  char host[256] = {0};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  nlohmann::json prof = {{"name", "cpu"},         {"kind", "cpu"},        {"memory_bytes", 0},
                         {"fp32_flops", 1e15},    {"bf16_flops", 1e15},   {"fp16_flops", 1e15},
                         {"efficiency", 1.0},     {"memory_bw", 1e14},    {"intra_node_bw", 1e14},
                         {"inter_node_bw", 1e14}, {"latency_s", 0.0},     {"launch_overhead_s", 0.0},
                         {"workspace_bytes", 0},  {"fragmentation", 0.0}, {"source", "test: far too fast"}};
  test::write_file(dir.file(std::string("profile-") + host + ".json"), prof.dump());
  test::write_file(dir.file("mlp.toml"),
                   "[model]\nname = \"mlp\"\nhidden = [64]\n[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = "
                   "16\nsteps = 12\nthreads = 1\n[checkpoint]\nat_end = false\n[log]\nprogress = \"plain\"\n");
  auto r = run_command(clean_env("GTRAIN_PROFILE_DIR=" + dir.path()) + GTRAIN_BINARY + " run " + dir.file("mlp.toml") +
                       " --ranks 1 --run-dir " + dir.file("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string said = "above the planner's estimate";
  const auto at = r.output.find(said);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(said, at + 1), std::string::npos) << "said once\n" << r.output;
  EXPECT_NE(r.output.find("gtrain plan --calibrate"), std::string::npos) << r.output;
  int estimates = 0, with_est = 0;
  for (const auto& rec : test::read_jsonl(dir.file("run/metrics.jsonl"))) {
    if (rec.value("kind", "") == "estimate") {
      ++estimates;
      EXPECT_GT(rec.at("error").get<double>(), 0.25) << rec.dump();
      EXPECT_GT(rec.at("measured_step_s").get<double>(), rec.at("est_step_s").get<double>());
    }
    if (rec.value("kind", "") == "train" && rec.contains("est_step_s")) ++with_est;
  }
  EXPECT_EQ(estimates, 1);
  EXPECT_EQ(with_est, 12);
  // Once per machine (issue 47: it greeted the README tour's first command): a second run (--force:
  // the first one again) keeps the record but prints nothing; forgetting the note (gtrain plan --calibrate does) says
  // it again.
  const std::string run2 = clean_env("GTRAIN_PROFILE_DIR=" + dir.path()) + GTRAIN_BINARY + " run " +
                           dir.file("mlp.toml") + " --ranks 1 --no-resume --force --run-dir " + dir.file("run2");
  r = run_command(run2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find(said), std::string::npos) << "said once per machine\n" << r.output;
  estimates = 0;
  for (const auto& rec : test::read_jsonl(dir.file("run2/metrics.jsonl")))
    estimates += rec.value("kind", "") == "estimate";
  EXPECT_EQ(estimates, 1);
  const std::string marker = dir.file(std::string("note-estimate-off-") + host);
  ASSERT_TRUE(std::filesystem::exists(marker));
  std::filesystem::remove(marker);
  r = run_command(run2 + " --set train.steps=12");
  EXPECT_NE(r.output.find(said), std::string::npos) << r.output;
}

TEST(PlanCli, CalibrateSavesAProfileLaterPlansUse) {
  test::TempDir dir;
  auto r = run_command(clean_env("GTRAIN_PROFILE_DIR=" + dir.path()) + GTRAIN_BINARY + " plan --calibrate --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const auto& c = j.at("calibration");
  EXPECT_GT(c.at("matmul_fp32_flops").get<double>(), 1e8);
  EXPECT_EQ(c.at("allreduce_measured_by"), "memcpy proxy");
  const std::string saved = c.at("saved_to");
  ASSERT_TRUE(std::filesystem::exists(saved));
  const auto profile = nlohmann::json::parse(test::read_file(saved));
  EXPECT_EQ(profile.at("kind"), "cpu");
  // The per-thread figures the CPU step-time model prices a rank's threads with.
  for (const char* k : {"cores", "fp32_flops_1thread", "attention_flops_1thread", "elementwise_bw", "norm_s",
                        "activation_s", "softmax_s", "optimizer_s", "memory_bound_speedup", "block_speedup"}) {
    EXPECT_GT(profile.at(k).get<double>(), 0.0) << k;
  }
  EXPECT_GE(profile.at("block_remainder_s").get<double>(), 0.0);

  test::write_file(dir.file("mlp.toml"),
                   "[model]\nname = \"mlp\"\nhidden = [32]\n[data]\nkind = \"synthetic\"\nsynthetic_samples = 256\n"
                   "[train]\nglobal_batch = 16\nepochs = 2.0\n");
  r = run_command(clean_env("GTRAIN_PROFILE_DIR=" + dir.path()) + GTRAIN_BINARY + " plan " + dir.file("mlp.toml"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile   cpu (calibrated on"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("32 steps"), std::string::npos) << "2 epochs of 256 samples at 16 per step: " << r.output;
  r = run_command(clean_env("GTRAIN_PROFILE_DIR=" + dir.path()) + GTRAIN_BINARY + " plan " + dir.file("mlp.toml") +
                  " --gpus 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("chosen: dp=4 tp=1 pp=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model mlp does not support tensor parallel"), std::string::npos) << r.output;
}

// Issue 47: a stage whose first step cannot finish before its deadline is refused before any rank
// starts (one line: the estimate, the time left, what to change; exit 2), not started to save
// nothing. (A short step in a short stage still starts: Cli.CheckpointEvalAndDeadlineOrder runs one
// in 5 s.)
TEST(RunCli, RefusesAStepLongerThanTheStage) {
  test::TempDir dir;
  test::write_file(dir.file("big.toml"),
                   "[model]\nname = \"gpt\"\nn_layer = 4\nn_head = 4\nn_embd = 256\nseq_len = 256\n[data]\nkind = "
                   "\"synthetic\"\n[train]\nglobal_batch = 4096\nsteps = 10\n");
  auto r = run_command(clean_env("GTRAIN_PROFILE_DIR=" + dir.path()) + GTRAIN_BINARY + " run " + dir.file("big.toml") +
                       " --ranks 1 --time-limit 30s --run-dir " + dir.file("run"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(test::lines(r.output).size(), 1u) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m,
                                std::regex(R"(the first step is estimated at ([0-9.e+]+) s and a save at 1 s, but the )"
                                           R"(stage has (2\d|30)(\.\d+)? s before its deadline \(--time-limit\))")))
      << r.output;
  EXPECT_GT(std::stod(m[1]), 100.0);
  EXPECT_NE(r.output.find("hint: give the stage at least"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("run/plan.json")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("run/metrics.jsonl")));
}

TEST(RunCli, PrintsThePlanAndRefusesWhatItCannotExecute) {
  test::TempDir dir;
  const std::string cfg =
      "[model]\nname = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 16\nseq_len = 8\n[data]\nkind = \"synthetic\"\n"
      "synthetic_samples = 64\n[train]\nglobal_batch = 8\nsteps = 2\n[log]\nprogress = \"none\"\n";
  test::write_file(dir.file("tiny.toml"), cfg);
  auto r = run_command(clean_env("GTRAIN_PROFILE_DIR=" + dir.path()) + GTRAIN_BINARY + " run " + dir.file("tiny.toml") +
                       " --run-dir " + dir.file("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain: plan dp=1 tp=1 pp=1 zero=0 micro_batch=8 grad_accum=1"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("gtrain: est "), std::string::npos) << r.output;
  const auto plan = nlohmann::json::parse(test::read_file(dir.file("run/plan.json")));
  EXPECT_GT(plan.at("est_step_seconds").get<double>(), 0);
  r = run_command(clean_env("GTRAIN_PROFILE_DIR=" + dir.path()) + GTRAIN_BINARY + " run " + dir.file("tiny.toml") +
                  " --set parallel.mode=explicit --set parallel.tp=2 --run-dir " + dir.file("run2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tp*pp = 2 must divide the 1 granted ranks"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gtrain
