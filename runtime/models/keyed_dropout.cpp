// keyed_dropout.cpp: layout-independent dropout masks.
#include "runtime/models/keyed_dropout.h"

#include <ATen/Parallel.h>

#include "runtime/core/errors.h"
#include "runtime/data/rng.h"

namespace gtrain {

namespace {

thread_local DropoutRows t_rows;

// The key of one mask plane: (seed, global sample, site, global head or none).
uint64_t plane_key(const DropoutRows& r, int64_t row, uint64_t site, int64_t head) {
  const uint64_t sample = static_cast<uint64_t>(r.first_sample + row);
  return rng::hash(rng::hash(r.seed ^ 0x6a09e667f3bcc909ull, sample), site, static_cast<uint64_t>(head + 1));
}

}  // namespace

DropoutRows current_dropout_rows() {
  return t_rows;
}

DropoutRowsScope::DropoutRowsScope(const DropoutRows& rows) : saved_(t_rows) {
  t_rows = rows;
}

DropoutRowsScope::~DropoutRowsScope() {
  t_rows = saved_;
}

torch::Tensor keyed_drop_mask(at::IntArrayRef shape, double p, uint64_t site, const torch::Device& device,
                              int64_t head_offset) {
  const DropoutRows rows = t_rows;
  GT_CHECK(rows.active, "keyed_drop_mask outside a DropoutRowsScope");
  GT_CHECK(!shape.empty() && (head_offset < 0 || shape.size() >= 2), "keyed_drop_mask: shape needs a row dimension");
  const int64_t n_rows = shape[0], heads = head_offset >= 0 ? shape[1] : 1;
  const int64_t planes = n_rows * heads;
  int64_t total = 1;
  for (int64_t s : shape) total *= s;
  const int64_t plane = planes > 0 ? total / planes : 0;
  auto key_of = [&](int64_t i) {
    return plane_key(rows, i / heads, site, head_offset >= 0 ? head_offset + i % heads : -1);
  };

  if (device.is_cpu()) {
    // Counter-based draws (splitmix64): the same on every platform, LibTorch version and thread count.
    auto drop = torch::empty(shape, torch::TensorOptions().dtype(torch::kBool));
    bool* out = drop.data_ptr<bool>();
    const double threshold = p * 9007199254740992.0;  // p * 2^53: drop when the 53-bit draw is below
    at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        rng::Stream s(key_of(i));
        bool* o = out + i * plane;
        for (int64_t j = 0; j < plane; ++j) o[j] = static_cast<double>(s.next() >> 11) < threshold;
      }
    });
    return drop;
  }
  // Other devices: the device's own generator (Philox on CUDA), reseeded per plane.
  auto gen = at::globalContext().defaultGenerator(device).clone();
  auto u = torch::empty({planes, plane}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  for (int64_t i = 0; i < planes; ++i) {
    gen.set_current_seed(key_of(i));
    u[i].uniform_(0.0, 1.0, gen);
  }
  return u.lt(p).view(shape);
}

torch::Tensor keyed_dropout(const torch::Tensor& x, double p, uint64_t site, bool train, int64_t head_offset) {
  if (!train || p <= 0.0) return x;
  if (!t_rows.active) return torch::dropout(x, p, /*train=*/true);
  if (p >= 1.0) return x * 0.0;
  auto drop = keyed_drop_mask(x.sizes(), p, site, x.device(), head_offset);
  // masked_fill keeps only the 1-byte mask for backward; the scale is a scalar.
  return x.masked_fill(drop, 0.0).mul_(1.0 / (1.0 - p));
}

}  // namespace gtrain
