// The step cost's C from the model's shape, the cost of a run of positions, and the chunk schedule.
#include "engine/step_budget.h"

#include <algorithm>

#include "core/error.h"
#include "model/model.h"

namespace vt {

// A token's layers take 2 W FLOPs (a multiply and an add per weight it passes through). Each of
// the A attention layers then, per query head, takes a D-long dot product with each of the p keys
// before it and adds up as many D-long values: 4 D p FLOPs, A Hq 4 D p in all. The two are equal at
//   p = C = 2 W / (4 A Hq D) = W / (2 A Hq D).
// SmolLM2-135M (H 576, 30 layers, 9 heads of 64, 3 KV heads, MLP 1536): W = 30 (2 576 576 +
// 2 576 192 + 3 576 1536) = 106.2M, C = 106.2M / (2 30 9 64) = 3072. A hybrid Qwen3.5, where one
// layer in four attends, gets far more: 27B about 124K, 35B-A3B about 30K.
int64_t attention_cost_context(const ModelInfo& info) {
  const int64_t attention_width = info.attention_layers * info.attention_heads * info.attention_head_dim;
  if (info.layer_weights_per_token <= 0 || attention_width <= 0) return 0;
  return std::max<int64_t>(1, info.layer_weights_per_token / (2 * attention_width));
}

StepBudget::StepBudget(int64_t context, int64_t step_tokens, int64_t prefill_chunk, int64_t min_chunk)
    : context_(context), prefill_chunk_(prefill_chunk), min_chunk_(std::clamp<int64_t>(min_chunk, 1, prefill_chunk)) {
  VT_CHECK(context >= 0 && step_tokens >= prefill_chunk && prefill_chunk >= 1 && min_chunk >= 1,
           "step budget: context ", context, ", step tokens ", step_tokens, ", prefill chunk ", prefill_chunk,
           ", min chunk ", min_chunk);
  step_limit_ = 2.0 * double(step_tokens);
  chunk_limit_ = 2.0 * double(prefill_chunk);
}

double StepBudget::cost(int64_t begin, int64_t end) const {
  if (end <= begin) return 0;
  const double tokens = double(end - begin);
  if (context_ == 0) return tokens;
  // Sum of 1 + p / C over p in [begin, end).
  return tokens + tokens * (double(begin) + double(end - 1)) / (2.0 * double(context_));
}

int64_t StepBudget::tokens_within(int64_t begin, double cost_left, int64_t most) const {
  int64_t tokens = 0;
  while (tokens < most && cost(begin, begin + tokens + 1) <= cost_left) ++tokens;
  return tokens;
}

int64_t StepBudget::piece(int64_t window) const {
  if (context_ == 0) return prefill_chunk_;
  const int64_t window_end = window + prefill_chunk_;
  for (int64_t pieces = 1;; ++pieces) {
    const int64_t even = (prefill_chunk_ + pieces - 1) / pieces;
    const int64_t piece = std::min(prefill_chunk_, (even + min_chunk_ - 1) / min_chunk_ * min_chunk_);
    if (piece <= min_chunk_ || cost(window_end - piece, window_end) <= chunk_limit_) return piece;
  }
}

int64_t StepBudget::chunk_end(int64_t fed) const {
  const int64_t window = fed - fed % prefill_chunk_;
  const int64_t size = piece(window);
  return std::min(window + prefill_chunk_, window + ((fed - window) / size + 1) * size);
}

}  // namespace vt
