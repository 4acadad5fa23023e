// Perplexity of a token sequence: non-overlapping windows of `context` tokens, each scored on its
// own (token t of a window predicted from tokens 0..t-1 of that window); exp(mean NLL).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "model/model.h"

namespace vt {

struct PerplexityResult {
  double nll_sum = 0;            // natural log, summed over the predicted tokens
  int64_t predicted_tokens = 0;  // tokens minus one per window
  int64_t windows = 0;
  double perplexity = 0;
  double seconds = 0;
};

// on_window (optional) sees the windows done so far and their total.
PerplexityResult perplexity(Model& model, std::span<const int32_t> ids, int64_t context,
                            const std::function<void(int64_t done, int64_t total)>& on_window = {});

}  // namespace vt
