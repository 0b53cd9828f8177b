// fused_norm.cu: LayerNorm and RMSNorm with the residual add in and out (fused_kernels_cuda.h).
// One block a row: the sum (LayerNorm) and the second moment each a block reduction, the row read
// again from L1/L2 for each pass. The backward sums weight and bias gradients per block (in
// registers for rows up to 2048 wide) into a [blocks, width] buffer that the caller reduces.
#include "runtime/models/fused_cuda_common.cuh"
#include "runtime/models/fused_math.h"

namespace gtrain {
namespace cuda_kernels {
namespace {

namespace fm = fused_math;

// Threads a row: a power of two from 32 to 256, about one per element for narrow rows.
int row_threads(int64_t width) {
  int t = 32;
  while (t < width && t < 256) t *= 2;
  return t;
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(rows < 65536 ? (rows < 1 ? 1 : rows) : 65536);
}

__global__ void norm_forward_kernel(NormForwardArgs a) {
  const int64_t W = a.width;
  // After the add the row is read back from s, rounded to s's type, as the ATen ops would see it.
  const void* src = a.h ? a.s : a.x;
  const DType src_type = a.h ? a.s_type : a.x_type;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const int64_t base = r * W;
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < W; j += blockDim.x) {
      float v = ld(a.x, a.x_type, base + j);
      if (a.h) {
        v += ld(a.h, a.h_type, base + j);
        st(a.s, a.s_type, base + j, v);
        v = round_to(v, a.s_type);
      }
      sum += v;
    }
    const float mean = a.rms ? 0.0f : block_sum(sum) / static_cast<float>(W);
    float sq = 0.0f;
    for (int64_t j = threadIdx.x; j < W; j += blockDim.x) {
      const float d = ld(src, src_type, base + j) - mean;
      sq += d * d;
    }
    const float rstd = fm::norm_rstd(block_sum(sq) / static_cast<float>(W), a.eps);
    for (int64_t j = threadIdx.x; j < W; j += blockDim.x) {
      const float xhat = fm::norm_xhat(ld(src, src_type, base + j), mean, rstd);
      st(a.y, a.y_type, base + j, fm::norm_out(xhat, a.weight[j], a.bias ? a.bias[j] : 0.0f));
    }
    if (threadIdx.x == 0) {
      if (a.mean) a.mean[r] = mean;
      a.rstd[r] = rstd;
    }
  }
}

// Element j of row `base`'s backward: dx stored; dy * xhat and dy returned for the weight's and
// bias's gradients.
__device__ __forceinline__ void backward_element(const NormBackwardArgs& a, int64_t base, int64_t j, float mean,
                                                 float rstd, float mean_g, float mean_gx, float* gw, float* gb) {
  const float dy = ld(a.dy, a.dy_type, base + j);
  const float xhat = fm::norm_xhat(ld(a.s, a.s_type, base + j), mean, rstd);
  float dx = fm::norm_dx(dy * a.weight[j], xhat, mean_g, mean_gx, rstd);
  if (a.ds) dx += ld(a.ds, a.ds_type, base + j);
  st(a.dx, a.dx_type, base + j, dx);
  *gw = dy * xhat;
  *gb = dy;
}

// Columns a thread keeps its weight and bias gradient sums for in registers (rows up to
// kRegCols * blockDim.x wide: 2048 at 256 threads); wider rows sum in the partial buffers.
constexpr int kRegCols = 8;

__global__ void norm_backward_kernel(NormBackwardArgs a) {
  const int64_t W = a.width;
  float* dw = a.dw_partial + blockIdx.x * W;
  float* db = a.db_partial ? a.db_partial + blockIdx.x * W : nullptr;
  const bool in_regs = W <= kRegCols * static_cast<int64_t>(blockDim.x);
  float acc_w[kRegCols], acc_b[kRegCols];
#pragma unroll
  for (int k = 0; k < kRegCols; ++k) acc_w[k] = acc_b[k] = 0.0f;
  if (!in_regs) {
    for (int64_t j = threadIdx.x; j < W; j += blockDim.x) {
      dw[j] = 0.0f;
      if (db) db[j] = 0.0f;
    }
  }
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const int64_t base = r * W;
    const float mean = a.mean ? a.mean[r] : 0.0f, rstd = a.rstd[r];
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t j = threadIdx.x; j < W; j += blockDim.x) {
      const float g = ld(a.dy, a.dy_type, base + j) * a.weight[j];
      sg += g;
      sgx += g * fm::norm_xhat(ld(a.s, a.s_type, base + j), mean, rstd);
    }
    const float mean_g = a.rms ? 0.0f : block_sum(sg) / static_cast<float>(W);
    const float mean_gx = block_sum(sgx) / static_cast<float>(W);
    float gw = 0.0f, gb = 0.0f;
    if (in_regs) {
#pragma unroll
      for (int k = 0; k < kRegCols; ++k) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (j < W) {
          backward_element(a, base, j, mean, rstd, mean_g, mean_gx, &gw, &gb);
          acc_w[k] += gw;
          acc_b[k] += gb;
        }
      }
    } else {
      for (int64_t j = threadIdx.x; j < W; j += blockDim.x) {
        backward_element(a, base, j, mean, rstd, mean_g, mean_gx, &gw, &gb);
        dw[j] += gw;
        if (db) db[j] += gb;
      }
    }
  }
  if (in_regs) {
#pragma unroll
    for (int k = 0; k < kRegCols; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (j < W) {
        dw[j] = acc_w[k];
        if (db) db[j] = acc_b[k];
      }
    }
  }
}

}  // namespace

std::string norm_forward(const NormForwardArgs& a, void* stream) {
  if (a.rows == 0) return "";
  norm_forward_kernel<<<row_blocks(a.rows), row_threads(a.width), 0, static_cast<cudaStream_t>(stream)>>>(a);
  return launch_error("norm_forward");
}

int64_t norm_backward_blocks(int64_t rows) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    sms = 80;
  }
  const int64_t cap = 4 * static_cast<int64_t>(sms);  // enough blocks to fill the GPU, few partial rows
  return rows < 1 ? 1 : (rows < cap ? rows : cap);
}

std::string norm_backward(const NormBackwardArgs& a, void* stream) {
  const int64_t blocks = norm_backward_blocks(a.rows);
  norm_backward_kernel<<<static_cast<unsigned>(blocks), row_threads(a.width), 0, static_cast<cudaStream_t>(stream)>>>(
      a);
  return launch_error("norm_backward");
}

}  // namespace cuda_kernels
}  // namespace gtrain
