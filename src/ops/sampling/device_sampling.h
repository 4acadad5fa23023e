// Token sampling as the device does it (cuda::sample_rows; cpu::sample_rows is its CPU twin, token
// for token): the per-row parameters, the counter-based RNG (Philox4x32-10, Salmon et al., SC'11)
// and the per-element arithmetic both sides share. Header-only, host and device, C++17 (CUDA
// translation units include it); no engine headers.
//
// A row's token follows the distribution of the host Sampler (sampler.h): scaled logits
// s = logit / temperature (f32 division); the candidates in order of s, highest first, ties by
// the lower id; the first top_k of them; the shortest prefix of those whose probability mass
// reaches top_p (the token that crosses is in); probabilities exp(s - max s) over that set. The
// draw is Gumbel-max: the candidate with the highest s + G, G = -log(-log U) and U from
// Philox(key = seed, counter = (element / 4, 0, counter lo, counter hi)), word element % 4; so
// a token depends only on the logits, the seed and the counter (never on the batch), and the
// same seed and counter give the same token run to run (not the host Sampler's mt19937 stream).
// Top-p mass is summed in fixed point (kMassFractionBits) so the device sums it exactly in any
// order: a mass below 2^-40 of the top token's counts as 0 there, which moves the nucleus cut only
// when top_p sits within ~1e-7 of a prefix's mass.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define VT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define VT_HOST_DEVICE inline
#endif

namespace vt {

// One row to sample (32 bytes; the device reads an array of them).
struct SampleRowParams {
  uint64_t seed = 0;
  uint64_t counter = 0;      // the draw's counter: the sequence's index of the token being drawn
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;        // in (0, 1]; 1: no nucleus cut
  int32_t top_k = 0;         // 0 (or >= vocab): no cut; 1: greedy
  int32_t row = 0;           // the logits row to sample
};
static_assert(sizeof(SampleRowParams) == 32, "the device reads 32-byte rows");

namespace sampling {

// Largest vocabulary: ids are int32 and vocab * 2^kMassFractionBits must fit in 64 bits.
constexpr int64_t kMaxVocab = int64_t(1) << 23;
// Fixed-point fraction bits of a token's top-p mass exp(s - max) in [0, 1].
constexpr int kMassFractionBits = 40;

// Greedy rows take the argmax of the raw logits (as Sampler::greedy()).
VT_HOST_DEVICE bool greedy(const SampleRowParams& params) { return params.temperature == 0.0f || params.top_k == 1; }

VT_HOST_DEVICE uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
#endif
}
VT_HOST_DEVICE float bits_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
#endif
}

// s = logit / temperature, rounded once (IEEE division on both sides); -0 becomes +0 so that the
// order key ties them, as the host's comparison does.
VT_HOST_DEVICE float scaled_logit(float logit, float temperature) {
#if defined(__CUDA_ARCH__)
  const float s = __fdiv_rn(logit, temperature);
#else
  const float s = logit / temperature;
#endif
  return s == 0.0f ? 0.0f : s;
}

// A key whose unsigned order is the float order of s (finite or infinite; not NaN).
VT_HOST_DEVICE uint32_t order_key(float s) {
  const uint32_t bits = float_bits(s);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
VT_HOST_DEVICE float key_value(uint32_t key) { return bits_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key); }

// A token's top-p mass exp(s - max_s) in units of 2^-kMassFractionBits (truncated).
VT_HOST_DEVICE uint64_t fixed_mass(float s, float max_s) {
#if defined(__CUDA_ARCH__)
  const float p = expf(__fsub_rn(s, max_s));
  return uint64_t(__fmul_rn(p, 1099511627776.0f));  // 2^40
#else
  const float p = expf(s - max_s);
  return uint64_t(p * 1099511627776.0f);
#endif
}
static_assert(kMassFractionBits == 40, "fixed_mass scales by 2^40");

// The nucleus is the shortest prefix whose mass reaches this (in [1, total]): the host's
// "sum p / total >= top_p" in the fixed-point units.
VT_HOST_DEVICE uint64_t mass_target(float top_p, uint64_t total) {
  const double want = ceil(double(top_p) * double(total));
  if (!(want >= 1.0)) return 1;
  if (want >= double(total)) return total;
  return uint64_t(want);
}

// Philox4x32-10: 128-bit counter, 64-bit key -> four 32-bit words (Random123's round function and
// constants; checked against its known-answer vectors in tests/unit/test_device_sampling.cpp).
struct Words {
  uint32_t w[4];
};
VT_HOST_DEVICE void mul_hi_lo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(product >> 32);
  *lo = uint32_t(product);
}
VT_HOST_DEVICE Words philox4x32_10(Words counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) key0 += 0x9E3779B9u, key1 += 0xBB67AE85u;
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(0xD2511F53u, counter.w[0], &hi0, &lo0);
    mul_hi_lo(0xCD9E8D57u, counter.w[2], &hi1, &lo1);
    counter = Words{{hi1 ^ counter.w[1] ^ key0, lo1, hi0 ^ counter.w[3] ^ key1, lo0}};
  }
  return counter;
}
// The four random words of elements 4 * group .. 4 * group + 3 of a row's draw.
VT_HOST_DEVICE Words element_words(uint64_t seed, uint64_t counter, uint64_t group) {
  return philox4x32_10(Words{{uint32_t(group), uint32_t(group >> 32), uint32_t(counter), uint32_t(counter >> 32)}},
                       uint32_t(seed), uint32_t(seed >> 32));
}

// A standard Gumbel variate -log(E), E = -log(U), U = (word + 1/2) / 2^32. E is taken from the
// half of U's range where it is accurate in f32 (log U for U < 1/2, log1p(-(1 - U)) above), so
// G reaches 22.9 (U within 2^-33 of 1) and the far tail of a flat distribution keeps its mass.
VT_HOST_DEVICE float gumbel(uint32_t word) {
  float exponential;
  if (word < 0x80000000u) {
    const float u = float(2 * uint64_t(word) + 1) * 1.16415321826934814453125e-10f;  // 2^-33: exact scaling
    exponential = -logf(u);
  } else {
    const float one_minus_u = float(2 * uint64_t(~word) + 1) * 1.16415321826934814453125e-10f;
    exponential = -log1pf(-one_minus_u);
  }
  return -logf(exponential);
}

// The Gumbel-perturbed score of a candidate (argmax over the candidate set; ties to the lower id).
VT_HOST_DEVICE float perturbed(float s, uint32_t word) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(s, gumbel(word));
#else
  return s + gumbel(word);
#endif
}

// The passes over a row's logits a row's sampling makes (the bytes it reads are passes x vocab x
// the logits' element size): greedy or temperature alone 1; top-k +3 (radix select); top-p +4
// (the max, then a radix select); each select +1 when its boundary value is tied and only part
// of the tie is in (rare with real logits; not counted).
inline int sample_row_passes(const SampleRowParams& params, int64_t vocab) {
  if (greedy(params)) return 1;
  int passes = 1;
  if (params.top_k > 0 && params.top_k < vocab) passes += 3;
  if (params.top_p < 1.0f) passes += 4;
  return passes;
}

}  // namespace sampling
}  // namespace vt
