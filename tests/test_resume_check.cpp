// test_resume_check.cpp: the resume rules without a model: each refusal (not a training run's
// checkpoint, another model, global batch or optimizer, a failed probe) and each warning (drift that
// changes the trajectory, changed settings one by one), from a manifest and a configuration.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "runtime/core/errors.h"
#include "runtime/core/lr_schedule.h"
#include "runtime/core/resume_check.h"

namespace gtrain {
namespace {

const std::string kPath = "/runs/a/checkpoints/step_00000004";

JobConfig mlp_config() {
  JobConfig c;
  c.model.name = "mlp";
  c.model.hidden = {32};
  c.data.kind = DataKind::synthetic;
  c.train.global_batch = 16;
  c.train.steps = 10;
  c.train.seed = 3;
  return c;
}

// The manifest a training run with config `c` writes at `step`.
CheckpointManifest manifest_for(const JobConfig& c, int64_t step = 4) {
  CheckpointManifest m;
  m.step = step;
  m.consumed_samples = step * c.train.global_batch;
  for (const auto& f : cfg::list_fields(c.model))
    if (f.key != "plugin") m.meta.model[f.key] = f.value;
  m.meta.config = flat_fields(c);
  m.meta.lr_next = 0.5;
  m.meta.global_batch = c.train.global_batch;
  m.meta.seed = c.train.seed;
  m.meta.total_steps = 10;
  m.meta.precision = c.precision.dtype;
  m.meta.optimizer = c.optimizer.name;
  m.meta.train_samples = 100;
  m.meta.vocab_from_data = c.model.vocab <= 0;
  m.meta.train_data = nullptr;
  m.meta.probe_loss = 1.0;
  m.meta.probe_indices = std::vector<int64_t>{1, 2, 3};
  return m;
}

ResumeFacts facts_for(const JobConfig& c) {
  ResumeFacts f;
  f.train_samples = 100;
  f.train_identity = nullptr;
  f.global_batch = c.train.global_batch;
  f.total_steps = 10;
  f.probe_indices = {0, 1};
  return f;
}

// The value flat_fields gives `key` in `c` (the text the ledger and warnings show).
std::string text_of(const JobConfig& c, const std::string& key) {
  return flat_fields(c).at(key);
}

TEST(ResumeCheck, SameConfigResumesSilently) {
  const auto c = mlp_config();
  const auto v = check_resume(manifest_for(c), kPath, c, facts_for(c));
  EXPECT_FALSE(v.refused());
  EXPECT_EQ(v.drift, "");
  EXPECT_TRUE(v.warnings.empty());
  EXPECT_TRUE(v.config_changes.empty());
  EXPECT_EQ(v.probe_indices, (std::vector<int64_t>{1, 2, 3}));
}

TEST(ResumeCheck, RefusesACheckpointNoTrainingRunWrote) {
  const auto c = mlp_config();
  auto m = manifest_for(c);
  m.meta.global_batch.reset();
  m.meta.probe_loss.reset();
  const auto v = check_resume(m, kPath, c, facts_for(c));
  ASSERT_EQ(v.refusals.size(), 2u);
  EXPECT_FALSE(v.refusals[0].mismatch);
  EXPECT_EQ(v.refusals[0].message,
            kPath + "/manifest.json: key 'global_batch' is missing (not written by a training run)");
  EXPECT_EQ(v.refusals[1].message,
            kPath + "/manifest.json: key 'probe_loss' is missing (not written by a training run)");
  try {
    v.refusals[0].raise();
    FAIL();
  } catch (const ResumeMismatchError&) {
    FAIL() << "a checkpoint error, not the configuration's";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.exit_code(), kExitFailure);
  }
}

TEST(ResumeCheck, RefusesAnotherModel) {
  const auto c = mlp_config();
  auto wider = c;
  wider.model.hidden = {48};
  wider.model.n_layer = 9;  // not an mlp's key: may change
  const auto v = check_resume(manifest_for(c), kPath, wider, facts_for(wider));
  ASSERT_EQ(v.refusals.size(), 1u);
  EXPECT_TRUE(v.refusals[0].mismatch);
  EXPECT_EQ(v.refusals[0].message, kPath + " was written for a different model (model.hidden [32] -> [48])");
  EXPECT_EQ(v.refusals[0].hint, "use the model config the run started with, or --no-resume to start over");
  EXPECT_THROW(v.refusals[0].raise(), ResumeMismatchError);
}

// model.vocab = 0 is the data's vocabulary: the same as the saved one resumes, another is refused,
// saying the data changed.
TEST(ResumeCheck, VocabularyFromTheData) {
  JobConfig g;
  g.model.name = "gpt";
  g.model.vocab = 0;
  g.data.kind = DataKind::text_bytes;
  g.train.global_batch = 4;
  auto m = manifest_for(g);
  m.meta.model["vocab"] = "256";
  auto facts = facts_for(g);
  facts.data_vocab = 256;
  EXPECT_FALSE(check_resume(m, kPath, g, facts).refused());
  facts.data_vocab = 300;
  const auto v = check_resume(m, kPath, g, facts);
  ASSERT_EQ(v.refusals.size(), 1u);
  EXPECT_EQ(v.refusals[0].message, kPath +
                                       " was written for a different model (model.vocab 256 -> 300 "
                                       "(model.vocab = 0: the data's largest id + 1))");
  EXPECT_EQ(v.refusals[0].hint.rfind("the data's largest id changed (data.path / data.eval_path)", 0), 0u)
      << v.refusals[0].hint;
}

TEST(ResumeCheck, RefusesAnotherGlobalBatch) {
  const auto c = mlp_config();
  auto m = manifest_for(c);
  m.meta.global_batch = 32;
  const auto v = check_resume(m, kPath, c, facts_for(c));
  ASSERT_EQ(v.refusals.size(), 1u);
  EXPECT_TRUE(v.refusals[0].mismatch);
  EXPECT_EQ(v.refusals[0].message, kPath + " was written with train.global_batch = 32, this run has 16");
  EXPECT_EQ(v.refusals[0].hint, "keep the global batch across stages (the planner keeps it on any GPU count)");
}

TEST(ResumeCheck, RefusesAnotherOptimizer) {
  const auto c = mlp_config();
  auto m = manifest_for(c);
  m.meta.optimizer = "sgd";
  const auto v = check_resume(m, kPath, c, facts_for(c));
  ASSERT_EQ(v.refusals.size(), 1u);
  EXPECT_EQ(v.refusals[0].message, kPath + " was written with optimizer.name = sgd, this run has adamw");
  EXPECT_EQ(v.refusals[0].hint,
            "its optimizer state cannot carry over: use optimizer.name = sgd, or --no-resume to start over");
}

// Dropout, seed, precision and the training data may change: the trajectory differs, which one
// warning says (and the probe's refusal names, should the probe check fail).
TEST(ResumeCheck, DriftIsWarnedOfWhileTheRunGoesOn) {
  const auto c = mlp_config();
  auto d = c;
  d.model.dropout = 0.25;
  d.train.seed = 4;
  d.precision.dtype = "bf16";
  auto facts = facts_for(d);
  facts.train_samples = 120;
  const auto v = check_resume(manifest_for(c), kPath, d, facts);
  EXPECT_FALSE(v.refused());
  const std::string drift = "model.dropout " + text_of(c, "model.dropout") + " -> " + text_of(d, "model.dropout") +
                            ", train.seed 3 -> 4, precision.dtype fp32 -> bf16, the training data (synthetic 100 -> "
                            "120 samples)";
  EXPECT_EQ(v.drift, drift);
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_EQ(v.warnings[0],
            "resumed with " + drift + " changed since " + kPath + ": the trajectory differs from an uninterrupted run");
  EXPECT_TRUE(v.config_changes.contains("train.seed"));
  // A complete run trains no further: nothing to warn of.
  const auto done = check_resume(manifest_for(c, 10), kPath, d, facts);
  EXPECT_EQ(done.drift, drift);
  EXPECT_TRUE(done.warnings.empty());
}

// Shards added to token data: the files that changed are named, and the held-out tail moved.
TEST(ResumeCheck, ChangedTrainingFilesAreNamed) {
  auto c = mlp_config();
  c.data.kind = DataKind::tokens;
  auto m = manifest_for(c);
  m.meta.train_data = nlohmann::json::array({{{"file", "s_0.bin"}, {"size", 8}}});
  auto facts = facts_for(c);
  facts.has_eval = true;
  facts.train_identity =
      nlohmann::json::array({{{"file", "s_0.bin"}, {"size", 8}}, {{"file", "s_1.bin"}, {"size", 4}}});
  const auto v = check_resume(m, kPath, c, facts);
  EXPECT_EQ(v.drift,
            "the training data (tokens 100 samples; s_1.bin added; data.eval_fraction's held-out tail moved with it, "
            "data.eval_path would keep it fixed)");
}

// Every changed setting goes in the ledger's config_changes; those that change the trajectory are
// warned of one by one, the schedule's with the learning rate at the resumed step.
TEST(ResumeCheck, TrajectorySettingsAreWarnedOfOneByOne) {
  const auto c = mlp_config();
  auto d = c;
  d.optimizer.learning_rate = 2e-3;
  d.train.grad_clip = 0.5;
  const auto v = check_resume(manifest_for(c), kPath, d, facts_for(d));
  EXPECT_FALSE(v.refused());
  EXPECT_EQ(v.drift, "");
  const std::string lr_was = text_of(c, "optimizer.learning_rate"), lr_now = text_of(d, "optimizer.learning_rate");
  EXPECT_EQ(v.config_changes.at("optimizer.learning_rate"), nlohmann::json::array({lr_was, lr_now}));
  EXPECT_EQ(v.config_changes.size(), 2u);
  char lr_text[160];
  std::snprintf(lr_text, sizeof(lr_text), "; the learning rate at step 4 goes 0.5 -> %.6g",
                lr_at(d.train, 2e-3, 4, 10));
  ASSERT_EQ(v.warnings.size(), 2u);
  EXPECT_EQ(v.warnings[0], "optimizer.learning_rate " + lr_was + " -> " + lr_now + " since " + kPath +
                               ": changes the peak learning rate from step 4 on" + lr_text);
  EXPECT_EQ(v.warnings[1], "train.grad_clip " + text_of(c, "train.grad_clip") + " -> " + text_of(d, "train.grad_clip") +
                               " since " + kPath + ": changes gradient clipping from step 4 on");
  // The global batch the planner kept within parallel.batch_tolerance is not a change; a manifest
  // from before gtrain recorded the config has none.
  auto m = manifest_for(c);
  (*m.meta.config)["train.global_batch"] = "17";
  EXPECT_TRUE(check_resume(m, kPath, c, facts_for(c)).config_changes.empty());
  m.meta.config.reset();
  EXPECT_TRUE(check_resume(m, kPath, d, facts_for(d)).config_changes.empty());
}

TEST(ResumeCheck, ProbeTakesTheSavedWindowsWhileTheyExist) {
  const auto c = mlp_config();
  auto facts = facts_for(c);
  facts.train_samples = 3;  // window 3 is gone
  EXPECT_EQ(check_resume(manifest_for(c), kPath, c, facts).probe_indices, (std::vector<int64_t>{0, 1}));
  auto m = manifest_for(c);
  m.meta.probe_indices.reset();
  EXPECT_EQ(check_resume(m, kPath, c, facts_for(c)).probe_indices, (std::vector<int64_t>{0, 1}));
}

TEST(ResumeCheck, ProbeLossOutsideTheToleranceIsRefused) {
  ResumeVerdict v;
  EXPECT_FALSE(check_probe(v, kPath, "dp=1", 1.0, 1.0 + 1e-7, 1e-4).has_value());
  const auto r = check_probe(v, kPath, "dp=1", 1.0, 2.0, 1e-4);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->mismatch);
  EXPECT_EQ(r->message,
            "resume check failed: the probe batch's loss is 2.000000 after loading " + kPath +
                " on plan dp=1, 1.000000 at save (relative 1.000000 > checkpoint.probe_tolerance 0.000100)");
  EXPECT_EQ(r->hint, "the checkpoint did not load into this layout correctly; report it, or --no-resume");
  EXPECT_TRUE(check_probe(v, kPath, "dp=1", 1.0, NAN, 1e-4).has_value());
  v.drift = "train.seed 3 -> 4";
  const auto drifted = check_probe(v, kPath, "dp=1", 1.0, 2.0, 1e-4);
  ASSERT_TRUE(drifted.has_value());
  EXPECT_TRUE(drifted->mismatch);
  EXPECT_EQ(drifted->message, r->message + "; changed since the checkpoint: train.seed 3 -> 4");
  EXPECT_EQ(drifted->hint.rfind("restore those settings", 0), 0u);
}

TEST(ResumeCheck, DataFilesChangedNamesThreeAndCountsTheRest) {
  using J = nlohmann::json;
  const auto files = [](std::initializer_list<std::pair<const char*, int>> fs) {
    J out = J::array();
    for (const auto& [name, size] : fs) out.push_back({{"file", name}, {"size", size}});
    return out;
  };
  EXPECT_EQ(data_files_changed(files({{"a", 1}, {"b", 2}}), files({{"a", 1}, {"b", 2}})), "");
  EXPECT_EQ(data_files_changed(files({{"a", 1}, {"b", 2}}), files({{"a", 9}, {"c", 2}})),
            "a changed, c added, b removed");
  EXPECT_EQ(data_files_changed(files({}), files({{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}, {"e", 1}})),
            "a added, b added, c added and 2 more");
  EXPECT_EQ(data_files_changed(nullptr, files({{"a", 1}})), "");
}

}  // namespace
}  // namespace gtrain
