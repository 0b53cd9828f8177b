// trainer_checkpoint.cpp: the Trainer's checkpoints: its saves (interval, final, asynchronous with
// their probe loss) and resuming from a checkpoint (see trainer.h).
#include "runtime/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <iostream>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/core/errors.h"
#include "runtime/core/heartbeat.h"
#include "runtime/core/resume_check.h"
#include "runtime/core/run_dir/run_records.h"
#include "runtime/core/schedule.h"

namespace gtrain {

void Trainer::settle_pending_probe() {
  if (!pending_probe_) return;
  // No step followed the save: the probe is the next step's loss, computed by its forward alone.
  const int64_t saved = last_saved_step_;
  pending_probe_->set_value(next_step_probe_loss(step_batch_indices(saved), saved));
  pending_probe_.reset();
}

double Trainer::save_checkpoint_now(bool next_step_follows) {
  const auto t0 = std::chrono::steady_clock::now();
  Heartbeat::get().phase(RankPhase::save);
  settle_pending_probe();  // an earlier save's, should one still wait
  SaveRequest r;
  r.dir = paths_.checkpoints;
  r.step = step_;
  last_saved_step_ = step_;
  r.consumed_samples = step_ * layout_.global_batch();
  r.shards = engine_->state_shards();
  r.rank = comm_->rank();
  r.world = comm_->size();
  r.keep = config_.checkpoint.keep;
  r.token = stage_.save_token.empty() ? "0" : stage_.save_token;
  const bool deferred = config_.checkpoint.async && next_step_follows && step_ < total_steps_;
  r.live_sources = deferred;
  if (deferred) {
    // The next step's training loss is the probe: its forward is work the step does anyway.
    pending_probe_ = std::make_unique<std::promise<double>>();
    if (r.rank == 0) {
      r.meta = checkpoint_meta();
      r.meta.probe_step = step_ + 1;
      r.meta.probe_indices = step_batch_indices(step_);
      r.probe = pending_probe_->get_future().share();
    }
  } else {
    const std::vector<int64_t> probe_idx = probe_indices();
    const double probe = probe_loss(probe_idx);
    if (r.rank == 0) {
      r.meta = checkpoint_meta();
      r.meta.probe_loss = probe;
      r.meta.probe_indices = probe_idx;  // the windows a resume on changed data probes again
    }
  }
  writer_->save(std::move(r));
  const double stall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  save_stall_total_ += stall;
  CheckpointRecord rec;
  rec.step = step_, rec.stall_s = stall, rec.async = config_.checkpoint.async, rec.time = unix_now();
  // The write save() waited for (async: the previous save's) or just made (synchronous).
  if (writer_->last_write_seconds() > 0) rec.previous_write_s = writer_->last_write_seconds();
  metrics_->write(record_to_json(rec));
  max_save_seconds_ = std::max(max_save_seconds_, stall + writer_->last_write_seconds());
  Heartbeat::get().measured(RankPhase::save, std::max(stall, writer_->last_write_seconds()));
  return stall;
}

void Trainer::finish_saves() {
  const auto t0 = std::chrono::steady_clock::now();
  Heartbeat::get().phase(RankPhase::save);
  settle_pending_probe();
  writer_->wait();
  save_stall_total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  max_save_seconds_ = std::max(max_save_seconds_, writer_->last_write_seconds());
}

void Trainer::resume(const std::string& path) {
  CheckpointReader ck(path);
  ResumeFacts facts;
  facts.data_vocab = data_.train->spec().vocab;
  facts.train_samples = data_.train->size();
  facts.train_identity = data_.train->identity();
  facts.has_eval = data_.eval != nullptr;
  facts.global_batch = layout_.global_batch();
  facts.total_steps = total_steps_;
  facts.probe_indices = probe_indices();
  facts.base_model = base_model_;
  facts.teacher = teacher_;
  // Refused before any tensor is read: another model, global batch or optimizer.
  const ResumeVerdict verdict = check_resume(ck.manifest(), path, config_, facts);
  if (verdict.refused()) verdict.refusals.front().raise();
  engine_->load_state(ck.reader());
  step_ = ck.step();
  if (ck.consumed_samples() != step_ * layout_.global_batch()) {
    throw CheckpointError(
        path + ": consumed_samples " + std::to_string(ck.consumed_samples()) + " is not step x global_batch",
        "resume from another checkpoint with --resume PATH, or start over with --no-resume");
  }
  prefetch_.reset();  // restart the data stream at the resumed step
  // Guard against silently wrong resumes: the probe batch must give the saved loss (an interval
  // save's probe is the next step's training loss: its batch, forward only, training mode).
  const auto& meta = ck.manifest().meta;
  double now = 0;
  if (meta.probe_step && *meta.probe_step == step_ + 1) {
    const bool same = meta.probe_indices &&
                      static_cast<int64_t>(meta.probe_indices->size()) == layout_.global_batch() &&
                      verdict.probe_indices == *meta.probe_indices;
    now = next_step_probe_loss(same ? verdict.probe_indices : step_batch_indices(step_), step_);
  } else {
    now = probe_loss(verdict.probe_indices);
  }
  const double saved = *meta.probe_loss;
  const auto refusal = check_probe(verdict, path, plan_.summary(), saved, now, config_.checkpoint.probe_tolerance);
  if (refusal) refusal->raise();
  if (comm_->rank() == 0) {
    for (const auto& w : verdict.warnings) std::cerr << "gtrain: warning: " << w << std::endl;
  }
  config_changes_ = verdict.config_changes;
  // Written when the stage runs: until then a refused start leaves metrics.jsonl as it was.
  ResumeRecord resume;
  resume.step = step_, resume.path = path, resume.probe_loss = now, resume.probe_loss_saved = saved;
  resume.plan = plan_.summary();
  pending_resume_record_ = record_to_json(resume);
}

void Trainer::prepare_saves() {
  saves_prepared_ = true;
  const auto& c = config_.checkpoint;
  if (paths_.checkpoints.empty() || !c.async || (c.interval <= 0 && !c.at_end)) return;
  // After the first step (the optimizer state exists) and the thread tuner: the writer thread
  // maps its staging memory now, while training goes on, not in the first save's stall.
  size_t bytes = 0;
  for (const auto& s : engine_->state_shards())
    if (s.write) bytes += s.data.nbytes();
  writer_->prepare(bytes);
}

void Trainer::maybe_checkpoint(bool final) {
  const auto& c = config_.checkpoint;
  if (paths_.checkpoints.empty()) return;
  const bool due = final ? c.at_end : (c.interval > 0 && step_ % c.interval == 0);
  if (due) save_checkpoint_now(/*next_step_follows=*/!final);
}

}  // namespace gtrain
