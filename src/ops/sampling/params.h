// A request's sampling parameters, and what a batched step hands back for each logit row when the
// model samples on its device (Model::forward_batch_sample). The host Sampler (sampler.h)
// and the device kernels (device_sampling.h) read the same SamplingParams.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "ops/sampling/device_sampling.h"

namespace vt {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  uint64_t seed = 0;
  // vLLM's min_p in [0, 1]: after temperature, tokens less likely than min_p times the most likely
  // one are dropped (before top-k and top-p). The host Sampler alone applies it.
  float min_p = 0.0f;
};

inline void check_sampling_params(const SamplingParams& params) {
  VT_CHECK(std::isfinite(params.temperature) && params.temperature >= 0, "temperature ", params.temperature,
           " must be finite and >= 0");
  VT_CHECK(params.top_p > 0 && params.top_p <= 1, "top_p ", params.top_p, " must be in (0, 1]");
  VT_CHECK(params.top_k >= 0, "top_k ", params.top_k, " must be >= 0");
  VT_CHECK(params.min_p >= 0 && params.min_p <= 1, "min_p ", params.min_p, " must be in [0, 1]");
}

// What Model::forward_batch_sample does with one row of logits.
struct RowOutput {
  enum class Kind : uint8_t {
    kNone,    // nothing (a prompt chunk before its last, a token fed again after a preemption)
    kToken,   // a token drawn on the device with `sampling` and `counter`
    kLogits,  // the row's logits to the host, as forward_batch gives them (the host samples)
  };
  Kind kind = Kind::kNone;
  SamplingParams sampling;  // kToken
  // kToken: the draw's counter, the index of the token being drawn among the sequence's
  // generated tokens; with sampling.seed it fixes the draw (ops/device_sampling.h).
  uint64_t counter = 0;
};

// The device's row parameters for a kToken row `row` of a vocab-wide step.
inline SampleRowParams sample_row_params(const SamplingParams& sampling, uint64_t counter, int64_t row, int64_t vocab) {
  check_sampling_params(sampling);
  VT_CHECK(sampling.min_p == 0.0f || sampling.temperature == 0.0f, "device sampling has no min_p (", sampling.min_p,
           "): sample on the host");
  SampleRowParams params;
  params.seed = sampling.seed;
  params.counter = counter;
  params.temperature = sampling.temperature;
  params.top_p = sampling.top_p;
  params.top_k = sampling.top_k > 0 && sampling.top_k < vocab ? int32_t(sampling.top_k) : 0;
  params.row = int32_t(row);
  return params;
}

}  // namespace vt
