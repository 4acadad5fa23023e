// Single-sequence generation: prefill the prompt, then decode token by token.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "model/model.h"
#include "ops/sampling/sampler.h"

namespace vt {

struct GenerateOptions {
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;
  bool keep_prompt_logits = false;  // keep the last prompt position's logits
};

struct GenerateResult {
  std::vector<int32_t> output_ids;
  std::vector<float> prompt_logits;  // [vocab], when asked for
  double prefill_seconds = 0, decode_seconds = 0;
};

// on_token (optional) sees each new id as it is produced.
GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace vt
