// OpenAI's presence and frequency penalties and vLLM's repetition penalty, as vLLM defines and
// orders them, applied to a row of logits on the host (a penalised request samples there, as one
// with logit_bias does). The presence and frequency penalties read the completion's tokens only;
// the repetition penalty (HF's rule) the prompt's and the completion's.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace vt {

struct Penalties {
  float presence = 0.0f;    // [-2, 2]: subtracted once from every token the completion holds
  float frequency = 0.0f;   // [-2, 2]: subtracted once per occurrence in the completion
  float repetition = 1.0f;  // > 0: a token of the prompt or the completion: a positive logit / r, else * r
  bool any() const { return presence != 0.0f || frequency != 0.0f || repetition != 1.0f; }
};

// Throws vt::Error for a value out of range.
void check_penalties(const Penalties& penalties);

// What the penalties read: the completion's token counts and, with a repetition penalty, the
// prompt's distinct tokens.
class PenaltyState {
 public:
  PenaltyState() = default;
  PenaltyState(const Penalties& penalties, std::span<const int32_t> prompt);
  void add(int32_t token);  // a completion token
  // Penalises logits[0, vocab) after the completion so far and then `drafted` (a verify row: the
  // drafts before it, counted as completion tokens). Repetition first, then frequency and
  // presence, as vLLM orders them.
  void apply(float* logits, int64_t vocab, std::span<const int32_t> drafted = {}) const;

 private:
  Penalties penalties_;
  std::unordered_map<int32_t, int32_t> counts_;  // completion token -> occurrences
  std::vector<int32_t> prompt_;                   // sorted, distinct (repetition penalty only)
};

}  // namespace vt
