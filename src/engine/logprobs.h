// Log-probabilities of generated tokens (OpenAI `logprobs`): the log-softmax of a step's logits at
// the chosen token and at the most likely alternatives.
#pragma once

#include <cstdint>
#include <vector>

namespace vt {

struct TokenLogprob {
  int32_t token_id = -1;
  float logprob = 0;
};

// The log-softmax of logits [vocab] at `chosen`, and in `top` the `top_count` most likely tokens
// (highest first, ties to the lower id). One pass over the vocabulary, no vocab-sized scratch.
TokenLogprob token_logprobs(const float* logits, int64_t vocab, int32_t chosen, int64_t top_count,
                            std::vector<TokenLogprob>& top);

}  // namespace vt
