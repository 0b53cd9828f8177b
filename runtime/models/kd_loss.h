// kd_loss.h: the knowledge-distillation term: a divergence between the teacher's and the student's
// softmax at temperature T, summed over the trained tokens and scaled by T^2, from a dense teacher
// (its logits, an online teacher) or a sparse one (its top-k and the tail's mass, the cache).
//
// Conventions (p_t teacher, p_s student, both softmax(logits / T), in fp32 or wider):
//   forward_kl  KL(p_t || p_s) = sum_v p_t (log p_t - log p_s). torchtune's ForwardKLLoss computes
//               the cross-entropy -sum_v p_t log p_s (no teacher entropy, no temperature): the same
//               gradient; here the value is the true KL, so it is 0 when the student equals the teacher.
//   reverse_kl  KL(p_s || p_t) = sum_v p_s (log p_s - log p_t).
//   jsd         0.5 KL(p_t || m) + 0.5 KL(p_s || m), m = (p_t + p_s) / 2: TRL's generalized JSD
//               (GKDTrainer's generalized_jsd_loss, m = beta p_t + (1 - beta) p_s) at beta = 0.5.
// Each term is 0 where its weight is 0 (0 log 0 = 0). The result is the SUM over the rows kept
// (like the SFT loss's sum over trained targets: runtime/models/token_layout.h's trained_rows), times
// T^2 (Hinton et al.: keeps the gradient's scale independent of T); the trainer divides it by the
// global trained-token count as it divides the cross-entropy (Trainer::loss_multiplier). Rows to
// leave out are given as a mask, or from labels with ignore index -100 (kd_mask_from_labels), as
// torchtune's and TRL's losses take them; masked rows are removed before any arithmetic, so their
// values (even inf or NaN) never reach the sum or the gradient.
//
// Sparse teacher (SparseTeacher, from a cache or sparse_teacher_from_logits): the k kept ids with
// their log-probabilities at T and the tail's mass 1 - sum_i p_t(i). The teacher's distribution is
// taken over k + 1 buckets, the kept ids and one "tail" bucket; the student's is collapsed onto the
// same buckets: p_s(tail) = sum of p_s over the ids not kept (a log-sum-exp over them, no 1 - x
// cancellation). The divergence is then the same formula over the buckets. It equals the dense
// divergence when k = V (no tail bucket then), and is a lower bound of it otherwise (the data
// processing inequality: merging outcomes never increases an f-divergence); only how the tail's mass
// spreads over the tail's ids is lost. The same top-k gives bitwise the same value whether it comes
// from dense teacher logits or from the cache's fp32 copy of them. The teacher's tail mass is
// floored at 1e-30 (where the kept ids hold all of it to fp64's digits): reverse KL and JSD then
// stay finite and push the student's tail towards 0; forward KL moves by under 1e-28.
//
// Gradients flow to the student's logits (the teacher's inputs may require grad too, for checks).
// Vocabulary-parallel logits (tp > 1) are not supported: the rows must hold the whole vocabulary.
// Memory: a few [N, V] fp32 temporaries; the caller may pass the rows in chunks and add the sums.
#pragma once

#include <string>

#include <torch/torch.h>

namespace gtrain {

enum class KdDivergence { forward_kl, reverse_kl, jsd };

// "forward_kl" | "reverse_kl" | "jsd" (distill.loss); a ConfigError naming the key otherwise.
KdDivergence parse_kd_divergence(const std::string& name);

// The teacher's top-k at temperature T for N rows.
struct SparseTeacher {
  torch::Tensor ids;       // [N, k] int32 or int64: the kept token ids (distinct within a row)
  torch::Tensor logprobs;  // [N, k]: log p_t(id) at T
  torch::Tensor tail;      // [N]: 1 - sum of the kept probabilities (clamped to [0, 1])
};

// A sparse teacher from kept raw logits [N, k] (at T = 1, any order) and the log-sum-exp of each
// whole row at T, lse_T [N] = logsumexp(z / T) (fp64: the tail's mass 1 - sum_i p_i takes its digits
// from it): log p = z / T - lse_T, formed in fp64 and rounded to the logits' compute dtype. What the
// cache stores.
SparseTeacher sparse_teacher(const torch::Tensor& ids, const torch::Tensor& top_logits, const torch::Tensor& lse_t,
                             double temperature);

// The top-k of dense teacher logits [N, V] (raw, T = 1) as sparse_teacher gives it from the
// values a cache would store: topk(z, k) of z in fp32 (fp64 for fp64 logits), lse_T in fp64.
struct TeacherTopK {
  torch::Tensor ids;     // [N, k] int64, by descending logit
  torch::Tensor logits;  // [N, k]: the raw logits z at those ids
  torch::Tensor lse;     // [N] fp64: logsumexp(z / T) of the whole row
};
TeacherTopK teacher_top_k(const torch::Tensor& teacher_logits, int64_t k, double temperature);
SparseTeacher sparse_teacher_from_logits(const torch::Tensor& teacher_logits, int64_t k, double temperature);

// [N] bool: labels != ignore_index (labels [N] int64, -100 = not trained, as torchtune and TRL).
torch::Tensor kd_mask_from_labels(const torch::Tensor& labels, int64_t ignore_index = -100);

// T^2 x the sum over the rows where `mask` [N] (bool or 0/1, undefined: every row) is set of the
// per-row divergence between softmax(teacher_logits / T) and softmax(student_logits / T), both [N, V].
torch::Tensor kd_loss_sum(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                          const torch::Tensor& mask, KdDivergence kind, double temperature);

// The same against a sparse teacher (the bucket estimator above); `teacher` holds N rows like the
// student's [N, V] logits, and its temperature must be `temperature`.
torch::Tensor kd_loss_sum(const torch::Tensor& student_logits, const SparseTeacher& teacher, const torch::Tensor& mask,
                          KdDivergence kind, double temperature);

}  // namespace gtrain
