// reproducible.h: the arithmetic of bitwise mode (train.reproducible = "bitwise"): the step's chunk
// gradients summed in one canonical pairwise tree (ChunkTree), the gradient norm as an exact sum of
// squares that no partition of the elements can change (exact_norm), and an optimizer update whose
// result for an element does not depend on where the element sits in a flat buffer.
//
// Why these three. A float sum depends on its order. Bitwise mode fixes the order of every sum that
// crosses a layout boundary:
//  - Gradients: chunk c of N is a leaf of the binary tree over [0, 2^ceil(log2 N)); a node is the
//    sum of its two halves, a half wholly past N is missing (the node is its left half). Whoever
//    holds a contiguous, aligned run of leaves can sum it; the engines send each chunk's slice to
//    the rank that owns it and push the leaves in chunk order, so one rank or eight compute the same
//    additions.
//  - The norm: each element's square is exact in double (24-bit mantissa squared); the squares are
//    scaled by the global largest power of two and cut into four 30-bit integer limbs, whose integer
//    sums are exact in any order and over any ranks; the double is rebuilt once from the integers.
//  - The optimizer: ATen's CPU kernels take a vectorised path for the body of a range and a scalar
//    one for its tail (and split ranges over threads), and with fused multiply-adds the two round
//    differently: an element's update would depend on the ZeRO shard boundaries. The CPU update here
//    is one plain loop compiled without floating-point contraction (-ffp-contract=off). CUDA's
//    element-wise kernels compute every element alike.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace gtrain {

class Communicator;

// The canonical sum of one step's chunk values (gradients, or one slice of them), pushed in
// chunk order 0, 1, ..., with O(log N) values alive at a time.
class ChunkTree {
 public:
  void reset() {
    nodes_.clear();
    next_ = 0;
  }
  // Adds chunk `index`'s value; `index` must be the next one (0 after reset). The tree keeps the
  // tensor (a clone when it is not summed into a node it already holds).
  void push(int64_t index, const torch::Tensor& value);
  // The sum over every pushed chunk in the canonical order (undefined when none was pushed). The
  // tree is empty afterwards.
  torch::Tensor fold();
  int64_t pushed() const { return next_; }
  // Values held now (tests check the O(log N) bound).
  size_t live() const { return nodes_.size(); }

 private:
  struct Node {
    int64_t lo = 0, size = 1;
    torch::Tensor value;
  };
  std::vector<Node> nodes_;
  int64_t next_ = 0;
};

// sqrt of the sum of squares of every element of `pieces` (float tensors on one device) and of the
// pieces other ranks of each communicator in `comms` pass: bitwise the same whichever rank holds
// which element. A collective over `comms` (in order). Returns a [1] double tensor on the pieces'
// device; inf or nan when an element is.
torch::Tensor exact_norm(const std::vector<torch::Tensor>& pieces, const std::vector<Communicator*>& comms,
                         const torch::TensorOptions& device);

// Bitwise mode's CPU optimizer updates over flat float32 chunks (torch::optim's arithmetic, element
// by element). `decayed` holds [begin, end) ranges that take weight decay.
struct AdamWStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;
};
void adamw_update_cpu(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                      torch::Tensor& exp_avg_sq, const std::vector<std::pair<int64_t, int64_t>>& decayed,
                      const AdamWStep& s);
struct SgdStep {
  double lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
};
// `momentum_buffer` undefined on the first step with momentum: it is created.
void sgd_update_cpu(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& momentum_buffer,
                    const std::vector<std::pair<int64_t, int64_t>>& decayed, const SgdStep& s);

}  // namespace gtrain
