// test_config.cpp: config parsing: valid files, every error kind and message, precedence, and
// agreement between configs/reference.toml and the config structs.
#include <gtest/gtest.h>

#include <regex>

#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

const std::map<std::string, std::string> kNoEnv;

std::string error_of(const std::string& toml, const std::vector<std::string>& sets = {},
                     const std::map<std::string, std::string>& env = kNoEnv) {
  try {
    parse_job_config(toml, "config.toml", sets, env);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "(no error)";
}

TEST(Config, ParsesValidFileIntoTypedStructs) {
  auto c = parse_job_config(R"(
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 32
hidden = [64, 32]
[data]
kind = "synthetic"
[optimizer]
learning_rate = 0.01
[train]
global_batch = 16
steps = 20
seed = 7
grad_clip = 0.5
[precision]
dtype = "bf16"
[parallel]
mode = "auto"
[checkpoint]
dir = "/tmp/x"
interval = 5
[log]
progress = "plain"
)",
                            "config.toml", {}, kNoEnv);
  EXPECT_EQ(c.model.name, "gpt");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(c.data.kind, DataKind::synthetic);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 0.01);
  EXPECT_EQ(c.train.global_batch, 16);
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_EQ(c.train.seed, 7);
  EXPECT_DOUBLE_EQ(c.train.grad_clip, 0.5);
  EXPECT_EQ(c.precision.dtype, "bf16");
  EXPECT_EQ(c.checkpoint.dir, "/tmp/x");
  EXPECT_EQ(c.checkpoint.interval, 5);
  EXPECT_EQ(c.log.progress, "plain");
  // Untouched keys keep their defaults.
  EXPECT_EQ(c.optimizer.name, "adamw");
  EXPECT_EQ(c.parallel.micro_batch, 0);
}

TEST(Config, QuotaWindowsAreArraysOfTables) {
  auto c = parse_job_config(R"(
[train]
steps = 1
[[schedule.window]]
days = "mon-fri"
hours = "18:00-08:00"
max_gpus = 4
[[schedule.window]]
days = "sat,sun"
)",
                            "c.toml", {}, kNoEnv);
  ASSERT_EQ(c.schedule.window.size(), 2u);
  EXPECT_EQ(c.schedule.window[0].hours, "18:00-08:00");
  EXPECT_EQ(c.schedule.window[0].max_gpus, 4);
  EXPECT_EQ(c.schedule.window[1].hours, "00:00-24:00");  // default
  // The resolved config writes them back as inline tables that parse to the same thing.
  auto again = parse_job_config(to_toml(c), "resolved.toml", {}, kNoEnv);
  EXPECT_EQ(to_toml(again), to_toml(c));
  EXPECT_EQ(error_of("[train]\nsteps = 1\n[[schedule.window]]\ndays = \"mon\"\nhour = \"08:00-09:00\"\n"),
            "config.toml:5:1: unknown key 'hour' in [schedule.window]; did you mean 'hours'?");
  EXPECT_NE(error_of("[train]\nsteps = 1\n[[schedule.window]]\ndays = \"someday\"\n")
                .find("schedule.window[0].days: unknown day 'someday'"),
            std::string::npos);
}

TEST(Config, IntegerIsAcceptedForFloatField) {
  auto c = parse_job_config("[optimizer]\nlearning_rate = 1\n[train]\nsteps = 1\n", "c.toml", {}, kNoEnv);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 1.0);
}

TEST(Config, UnknownKeyNamesFileLineColumnAndSuggests) {
  EXPECT_EQ(error_of("[train]\nsteps = 3\n\n[optimizer]\n  lerning_rate = 0.1\n"),
            "config.toml:5:3: unknown key 'lerning_rate' in [optimizer]; did you mean 'learning_rate'?");
}

TEST(Config, UnknownKeyWithoutCloseMatchListsValidKeys) {
  std::string e = error_of("[train]\nsteps = 3\nzzzzzzzzzz = 1\n");
  EXPECT_NE(e.find("config.toml:3:1: unknown key 'zzzzzzzzzz' in [train]; valid keys: global_batch, steps"),
            std::string::npos)
      << e;
}

TEST(Config, UnknownSectionSuggests) {
  EXPECT_EQ(error_of("[train]\nsteps = 3\n[optimiser]\nname = \"sgd\"\n"),
            "config.toml:3:2: unknown section [optimiser]; did you mean [optimizer]?");
}

TEST(Config, TopLevelKeyIsRejected) {
  EXPECT_NE(error_of("steps = 3\n").find("unknown top-level key 'steps'"), std::string::npos);
}

TEST(Config, WrongTypeNamesKeyAndExpectation) {
  EXPECT_EQ(error_of("[train]\nsteps = 3\nglobal_batch = \"big\"\n"),
            "config.toml:3:16: train.global_batch: expected an integer >= 1, got 'big' (string)");
  EXPECT_EQ(error_of("[train]\nsteps = 3\ndeterministic = 1\n"),
            "config.toml:3:17: train.deterministic: expected true or false, got 1 (integer)");
  EXPECT_EQ(error_of("[train]\nsteps = 2.5\n"),
            "config.toml:2:9: train.steps: expected an integer >= 0, got 2.5 (float)");
  EXPECT_EQ(error_of("[train]\nsteps = 3\n[model]\nhidden = [1, \"a\"]\n"),
            "config.toml:4:10: model.hidden: expected an array of integers, got [ 1, 'a' ] (array)");
}

TEST(Config, OutOfRangeNamesKeyAndRange) {
  EXPECT_EQ(error_of("[train]\nsteps = 3\nglobal_batch = 0\n"),
            "config.toml:3:16: train.global_batch: expected an integer >= 1, got 0 (integer)");
  EXPECT_EQ(error_of("[train]\nsteps = 3\n[model]\ndropout = 1.5\n"),
            "config.toml:4:11: model.dropout: expected a number in [0, 0.9], got 1.5 (float)");
  EXPECT_EQ(error_of("[train]\nsteps = 3\n[optimizer]\nlearning_rate = 0\n"),
            "config.toml:4:17: optimizer.learning_rate: expected a number > 0, got 0 (integer)");
  // Finite for a double, but not for the float tensor it becomes.
  EXPECT_EQ(
      error_of("[train]\nsteps = 3\n[optimizer]\nlearning_rate = 1e39\n")
          .rfind("config.toml:4:17: optimizer.learning_rate: expected a number > 0, within the 32-bit float range (|x| "
                 "<= 3.4e38), got 9.99",
                 0),
      0u);
}

// A check across keys names the --set or environment variable that set one of them, not the file.
TEST(Config, CrossKeyErrorsNameTheOverrideThatSetAKey) {
  const std::string gpt = "[train]\nsteps = 3\n[model]\nname = \"gpt\"\nn_embd = 128\n";
  EXPECT_EQ(error_of(gpt, {"model.n_head=3"}),
            "--set model.n_head=3: [model]: model.n_head = 3 must divide model.n_embd = 128");
  EXPECT_EQ(error_of(gpt, {}, {{"GTRAIN_SCHEDULE_STOP_SIGNALS", "[\"KILL\"]"}}),
            "environment GTRAIN_SCHEDULE_STOP_SIGNALS=[\"KILL\"]: schedule.stop_signals: unknown signal 'KILL' "
            "(expected USR1, USR2, TERM, INT, HUP)");
  EXPECT_EQ(error_of(gpt + "n_head = 3\n"), "config.toml: [model]: model.n_head = 3 must divide model.n_embd = 128");
}

TEST(Config, ChoiceErrorsListChoicesAndSuggest) {
  EXPECT_EQ(error_of("[train]\nsteps = 3\n[precision]\ndtype = \"bf61\"\n"),
            "config.toml:4:9: precision.dtype: expected one of \"fp32\", \"bf16\", \"fp16\" (did you mean \"bf16\"?), "
            "got 'bf61' (string)");
}

// The enum fields (enum_names.h) take exactly their table's names and are written back as names.
TEST(Config, EnumFieldsReadAndWriteTheirNames) {
  EXPECT_EQ(error_of("[train]\nsteps = 3\ndevice = \"tpu\"\n"),
            "config.toml:3:10: train.device: expected one of \"auto\", \"cpu\", \"cuda\" (did you mean \"cpu\"?), got "
            "'tpu' (string)");
  EXPECT_EQ(error_of("[train]\nsteps = 3\nlr_schedule = \"cosin\"\n"),
            "config.toml:3:15: train.lr_schedule: expected one of \"cosine\", \"linear\", \"constant\" (did you "
            "mean \"cosine\"?), got 'cosin' (string)");
  EXPECT_EQ(error_of("[train]\nsteps = 3\n[data]\nkind = 2\n"),
            "config.toml:4:8: data.kind: expected one of \"idx\", \"tokens\", \"text_bytes\", \"synthetic\", "
            "\"text\", \"jsonl\", got 2 (integer)");
  const JobConfig c = parse_job_config("[train]\nsteps = 3\nlr_schedule = \"linear\"\n", "config.toml",
                                       {"train.device=cpu", "train.fused_loss=off", "data.kind=text_bytes"}, kNoEnv);
  EXPECT_EQ(c.train.lr_schedule, LrSchedule::linear);
  EXPECT_EQ(c.train.device, DeviceRequest::cpu);
  EXPECT_EQ(c.train.fused_loss, FusedLoss::off);
  EXPECT_EQ(c.data.kind, DataKind::text_bytes);
  EXPECT_EQ(JobConfig().train.device, DeviceRequest::automatic);
  const auto flat = flat_fields(c);
  EXPECT_EQ(flat.at("train.lr_schedule"), "\"linear\"");
  EXPECT_EQ(flat.at("train.device"), "\"cpu\"");
  EXPECT_EQ(flat.at("train.fused_loss"), "\"off\"");
  EXPECT_EQ(flat.at("data.kind"), "\"text_bytes\"");
  EXPECT_EQ(str(c.train.device, "/", DeviceRequest::automatic, "/", FusedLoss::automatic), "cpu/auto/auto");
  // The resolved config parses back to the same values.
  const JobConfig again = parse_job_config(to_toml(c), "resolved.toml", {}, kNoEnv);
  EXPECT_EQ(again.train.lr_schedule, LrSchedule::linear);
  EXPECT_EQ(again.data.kind, DataKind::text_bytes);
}

TEST(Config, InvalidTomlNamesPosition) {
  std::string e = error_of("[train]\nsteps = = 3\n");
  EXPECT_EQ(e.rfind("config.toml:2:", 0), 0u) << e;
  EXPECT_NE(e.find("invalid TOML"), std::string::npos);
}

TEST(Config, CrossFieldRules) {
  EXPECT_NE(error_of("[train]\n").find("set exactly one of train.steps, train.epochs, train.tokens (none is set)"),
            std::string::npos);
  EXPECT_NE(error_of("[train]\nsteps = 3\nepochs = 1.0\n").find("(found train.steps = 3 train.epochs = 1)"),
            std::string::npos);
  EXPECT_NE(error_of("[train]\nsteps = 3\n[model]\nname = \"gpt\"\nn_embd = 30\nn_head = 4\n")
                .find("model.n_head = 4 must divide model.n_embd = 30"),
            std::string::npos);
  EXPECT_NE(error_of("[train]\nsteps = 3\n[parallel]\ntp = 2\n").find("parallel.mode = \"explicit\""),
            std::string::npos);
  // log.name is one directory under log.root: '..' put the run's files into the working directory.
  for (const char* bad : {"..", ".", "a/b", "/abs"}) {
    EXPECT_EQ(error_of("[train]\nsteps = 3\n", {std::string("log.name=\"") + bad + "\""}),
              std::string("--set log.name=\"") + bad +
                  "\": log.name: expected a plain name without '/' (not . or ..), got '" + bad +
                  "'; the run directory is <log.root>/<log.name>: set log.root to choose where, or pass --run-dir")
        << bad;
  }
  EXPECT_EQ(error_of("[train]\nsteps = 3\n[log]\nname = \"run..1.x\"\n"), "(no error)");
}

TEST(Config, PrecedenceCliOverEnvironmentOverFile) {
  const std::string file = "[train]\nsteps = 10\nglobal_batch = 8\nseed = 1\n";
  std::map<std::string, std::string> env = {
      {"GTRAIN_TRAIN_STEPS", "20"}, {"GTRAIN_TRAIN_SEED", "5"}, {"GTRAIN_RANK", "3"} /* not a section: ignored */};
  auto c = parse_job_config(file, "c.toml", {"train.steps=30", "model.hidden=[8, 4]", "data.path=/some/where"}, env);
  EXPECT_EQ(c.train.steps, 30);        // --set beats env and file
  EXPECT_EQ(c.train.seed, 5);          // env beats file
  EXPECT_EQ(c.train.global_batch, 8);  // file beats default
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(c.data.path, "/some/where");  // a bare word becomes a string
}

TEST(Config, OverrideErrorsNameTheOverride) {
  EXPECT_EQ(error_of("[train]\nsteps = 3\n", {"train.steps=x"}),
            "--set train.steps=x: train.steps: expected an integer >= 0, got 'x' (string)");
  EXPECT_EQ(error_of("[train]\nsteps = 3\n", {"train.stpes=4"}),
            "--set train.stpes=4: unknown key 'stpes' in [train]; did you mean 'steps'?");
  EXPECT_EQ(error_of("[train]\nsteps = 3\n", {"trian.steps=4"}),
            "--set 'trian.steps=4': unknown section [trian]; did you mean [train]?");
  EXPECT_EQ(error_of("[train]\nsteps = 3\n", {"steps"}),
            "--set 'steps': expected section.key=value, e.g. --set train.steps=100");
  EXPECT_EQ(error_of("[train]\nsteps = 3\n", {}, {{"GTRAIN_OPTIMIZER_LR", "0.1"}}),
            "environment GTRAIN_OPTIMIZER_LR=0.1: unknown key 'lr' in [optimizer]; valid keys: name, learning_rate, "
            "weight_decay, beta1, beta2, eps, momentum, nesterov, fused");
  // A misspelt section in a variable's name is named, not silently ignored; gtrain's own variables pass.
  EXPECT_EQ(error_of("[train]\nsteps = 3\n", {}, {{"GTRAIN_OPTIMISER_LEARNING_RATE", "0.1"}}),
            "environment GTRAIN_OPTIMISER_LEARNING_RATE: no config section [optimiser]; did you mean "
            "GTRAIN_OPTIMIZER_LEARNING_RATE?");
  EXPECT_EQ(error_of("[train]\nsteps = 3\n", {},
                     {{"GTRAIN_PROFILE_DIR", "/x"},
                      {"GTRAIN_INTERNAL_LOCKED", "/r"},
                      {"GTRAIN_WORKER", "w"},
                      {"GTRAIN_SLURM_DIR", "/s"},
                      {"GTRAIN_STAGE", "2"}}),
            "(no error)");
}

// Every problem of a file in one pass, in file order, one a line: unknown keys (a key of another
// section suggested by its section.key), wrong values, unknown sections.
TEST(Config, EveryProblemOfAFileInOnePass) {
  EXPECT_EQ(error_of("[train]\nsteps = 3\nlerning_rate = 0.1\nglobal_batch = 0\n[model]\ndropout = 1.5\n"
                     "[optimiser]\nname = \"sgd\"\n"),
            "config.toml:3:1: unknown key 'lerning_rate' in [train]; did you mean optimizer.learning_rate?\n"
            "  config.toml:4:16: train.global_batch: expected an integer >= 1, got 0 (integer)\n"
            "  config.toml:6:11: model.dropout: expected a number in [0, 0.9], got 1.5 (float)\n"
            "  config.toml:7:2: unknown section [optimiser]; did you mean [optimizer]?");
  // The right key in the wrong section, from the file or a --set; a key above every section.
  EXPECT_EQ(error_of("[train]\nsteps = 3\n[model]\nwarmup_steps = 5\n"),
            "config.toml:4:1: unknown key 'warmup_steps' in [model]; did you mean train.warmup_steps?");
  EXPECT_EQ(error_of("[train]\nsteps = 3\n", {"train.learning_rate=0.1"}),
            "--set train.learning_rate=0.1: unknown key 'learning_rate' in [train]; did you mean "
            "optimizer.learning_rate?");
  EXPECT_EQ(error_of("seed = 3\n[train]\nsteps = 3\n"),
            "config.toml:1:1: unknown top-level key 'seed'; keys belong in a section such as [train]; did you mean "
            "train.seed (under [train])?");
  // A short word is near too many keys of other sections: only its own section's are offered.
  EXPECT_EQ(error_of("[train]\nsteps = 3\n", {}, {{"GTRAIN_OPTIMIZER_LR", "0.1"}}).find("did you mean"),
            std::string::npos);
  // A --set or variable problem and a file's, together; the cross-field rules only once every value reads.
  EXPECT_EQ(error_of("[train]\nsteps = 2.5\n", {"steps"}),
            "--set 'steps': expected section.key=value, e.g. --set train.steps=100\n"
            "  config.toml:2:9: train.steps: expected an integer >= 0, got 2.5 (float)");
  EXPECT_EQ(error_of("[train]\nsteps = 3\nepochs = 1.0\n[model]\nname = \"gpt\"\nn_embd = 30\nn_head = 4\n"),
            "config.toml: [train]: set exactly one of train.steps, train.epochs, train.tokens (found train.steps = 3 "
            "train.epochs = 1)\n"
            "  config.toml: [model]: model.n_head = 4 must divide model.n_embd = 30");
}

// At most 20 lines: the first 19 problems, then how many more.
TEST(Config, ProblemsAreReportedUpToTwentyLines) {
  std::string toml = "[train]\nsteps = 3\n";
  for (int i = 0; i < 30; ++i) toml += "zz" + std::to_string(100 + i) + "zzzzzz = 1\n";
  const auto lines = test::lines(error_of(toml));
  ASSERT_EQ(lines.size(), 20u);
  EXPECT_EQ(lines[0].rfind("config.toml:3:1: unknown key 'zz100zzzzzz' in [train]; valid keys: ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[18].rfind("  config.toml:21:1: unknown key 'zz118zzzzzz' in [train]", 0), 0u) << lines[18];
  EXPECT_EQ(lines[19], "  ... and 11 more (30 problems in all)");
}

// Through the binary: every problem on its own line after "gtrain: config error:", exit 2.
TEST(Config, CommandReportsEveryProblem) {
  test::TempDir dir;
  test::write_file(dir.file("bad.toml"), "[train]\nsteps = 3\nlerning_rate = 0.1\n[model]\ndropout = 2\n");
  const auto r = test::run_command(GTRAIN_BINARY + " config show " + dir.file("bad.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "gtrain: config error: " + dir.file("bad.toml") +
                          ":3:1: unknown key 'lerning_rate' in [train]; did you mean optimizer.learning_rate?\n  " +
                          dir.file("bad.toml") +
                          ":5:11: model.dropout: expected a number in [0, 0.9], got 2 (integer)\n");
}

TEST(Config, MissingFileNamesPath) {
  try {
    load_job_config("/definitely/not/here.toml", {}, kNoEnv);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/definitely/not/here.toml: cannot open config file"), std::string::npos);
  }
}

TEST(Config, ResolvedTomlRoundTrips) {
  auto c =
      parse_job_config("[train]\nsteps = 9\n[model]\nname = \"cnn\"\nchannels = [4]\n[log]\nname = \"a \\\"q\\\" b\"\n",
                       "c.toml", {}, kNoEnv);
  auto again = parse_job_config(to_toml(c), "resolved.toml", {}, kNoEnv);
  EXPECT_EQ(to_toml(again), to_toml(c));
  EXPECT_EQ(again.log.name, "a \"q\" b");
  EXPECT_EQ(again.model.channels, (std::vector<int64_t>{4}));
}

// configs/reference.toml and the structs must agree: every key documented with a comment, every
// default equal, no key in the file that the structs do not know.
TEST(Config, ReferenceTomlAgreesWithStructs) {
  const std::string path = std::string(GTRAIN_SOURCE_DIR) + "/configs/reference.toml";
  const std::string text = test::read_file(path);
  ASSERT_FALSE(text.empty()) << path;
  // Reference has no train length set (all 0 = default), so parse with a length override.
  JobConfig parsed = parse_job_config(text, path, {"train.steps=1"}, kNoEnv);
  parsed.train.steps = 0;
  JobConfig defaults;
  EXPECT_EQ(to_toml(parsed), to_toml(defaults)) << "a default in configs/reference.toml differs from the structs";

  auto file_lines = test::lines(text);
  auto check_section = [&](const char* name, auto& section, const char*) {
    auto header = std::find(file_lines.begin(), file_lines.end(), "[" + std::string(name) + "]");
    ASSERT_NE(header, file_lines.end()) << "section [" << name << "] missing from reference.toml";
    for (const auto& f : cfg::list_fields(section)) {
      std::regex key_re("^" + f.key + " = ");
      auto it =
          std::find_if(header, file_lines.end(), [&](const std::string& l) { return std::regex_search(l, key_re); });
      ASSERT_NE(it, file_lines.end()) << name << "." << f.key << " is not documented in reference.toml";
      ASSERT_NE(it, file_lines.begin());
      EXPECT_EQ((it - 1)->rfind("# ", 0), 0u) << name << "." << f.key << " has no comment line above it";
      EXPECT_EQ(*(it - 1), "# " + f.doc) << name << "." << f.key << ": comment differs from the struct's doc";
    }
  };
  defaults.visit_sections(check_section);
}

}  // namespace
}  // namespace gtrain
