// RoPE's rotation frequencies, shared by the CPU reference and the CUDA prepare kernel: NeoX
// halves over the first rotary_dim dims of a head, pair i turning at inv_freq_i per position.
// Plain RoPE: inv_freq_i = theta^(-2i / rotary_dim). YaRN (the checkpoint's rope_parameters with
// rope_type "yarn", factor > 1): pairs that turn fewer than beta_slow times over the original
// context are interpolated (inv_freq / factor), pairs that turn more than beta_fast times are kept,
// with a linear ramp between; cos and sin are scaled by attention_factor (the softmax temperature
// of long contexts). The float32 arithmetic follows HF transformers' so the CPU matches it to
// rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#if defined(__CUDACC__)
#define VT_ROPE_FN __host__ __device__ __forceinline__
#else
#define VT_ROPE_FN inline
#endif

namespace vt {

struct Rope {
  float theta = 10000.0f;
  float factor = 1.0f;  // YaRN's interpolation factor; 1: plain RoPE
  // The ramp over pair indices: pairs below ramp_low keep their frequency, pairs at or above
  // ramp_low + ramp_span are interpolated.
  float ramp_low = 0.0f, ramp_span = 1.0f;
  float attention_factor = 1.0f;  // cos and sin times this
};

// YaRN as the checkpoint states it (HF's rope_parameters / rope_scaling keys).
struct YarnConfig {
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;
  std::optional<double> attention_factor, mscale, mscale_all_dim;
  bool truncate = true;
};

// The Rope of YaRN over rotary_dim dims; throws on a factor < 1 or a missing original context.
Rope yarn_rope(double theta, int64_t rotary_dim, const YarnConfig& yarn);

VT_ROPE_FN float rope_inv_freq(const Rope& rope, int64_t pair, int64_t rotary_dim) {
  const float pos_freq = powf(rope.theta, float(2 * pair) / float(rotary_dim));
  if (rope.factor == 1.0f) return 1.0f / pos_freq;
  const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (rope.factor * pos_freq);
  const float ramp = fminf(fmaxf((float(pair) - rope.ramp_low) / rope.ramp_span, 0.0f), 1.0f);
  const float keep = 1.0f - ramp;
  return interpolation * (1.0f - keep) + extrapolation * keep;
}

}  // namespace vt
