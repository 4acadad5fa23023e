// What the attention kernels of attention.cu and attention_grouped.cu share: the arguments of a
// split-key launch and the grouped kernels' entry point (internal to the CUDA backend).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/attention/attention.h"
#include "ops/step_layout.h"
#include "trace/intent.h"

namespace vt::cuda {

constexpr int kAttentionWarps = 4;  // warps per block of every split-key kernel

struct AttentionArgs {
  void* out;
  float* partials;  // [T, Hq, splits, D + 2]: running max, sum, then D accumulators
  const float* q;
  const void* gate;
  const void* k_cache;
  const void* v_cache;
  StepLayout layout;
  AttentionShape shape;
  float scale;
  int64_t num_splits, keys_per_split;
  uint8_t* q_codes;  // optional FP8 output for the o_proj: [T, Hq*D] e4m3 and [T, Hq*D/128] scales
  float* q_scales;
};

// The split-key partials ([T, Hq, splits, D + 2]) by a grouped kernel, grid (T, Hkv, splits): on
// the tensor cores (bf16, head_dim 128 or 256, up to 8 query heads per KV head) or on the CUDA cores (head_dim 64, 128 or 256, groups of 1-4, 6
// or 8); false where neither serves the shape (the caller runs a block per query head).
bool launch_grouped_attention(DType act, const AttentionArgs& args, dim3 grid, const ::vt::trace::LaunchCost& cost,
                              cudaStream_t stream);

}  // namespace vt::cuda
