// What a checkpoint's generation_config.json says about generating: its end-of-sequence ids (HF
// generate and vLLM stop on every one; an instruct model's list often holds more than the
// tokenizer's eos_token) and the sampling it was published with (temperature, top_k, top_p, min_p,
// repetition_penalty: the fields vLLM reads), which vLLM applies to requests that leave them out
// (its --generation-config auto).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ops/sampling/params.h"

namespace vt {

struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;
  std::optional<float> temperature;
  std::optional<int64_t> top_k;  // 0 or absent: no limit
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;  // > 0; 1: none

  bool has_sampling() const { return temperature || top_k || top_p || min_p || repetition_penalty; }
  // `base` with the fields of SamplingParams this config sets (all but repetition_penalty).
  SamplingParams sampling_over(SamplingParams base) const;
  // "temperature=0.6 top_k=20 top_p=0.95": the fields set, for a start-up line.
  std::string sampling_summary() const;
};

// `dir`/generation_config.json; an empty config where there is none. Throws vt::Error naming the file
// and key for a value out of range or of the wrong type.
GenerationConfig load_generation_config(const std::filesystem::path& dir);

}  // namespace vt
