// The engine's step budget by cost: a token's forward costs its weights' work plus its attention
// over the context before it, so a token at context position p costs 1 + p / C units, C being the
// position at which the two are equal. Prompts are fed in chunks of at most prefill_chunk tokens
// that shrink past context C, so a step deep in a long prompt costs about what one at its start
// does, and decoding requests in the same step wait about as long.
#pragma once

#include <cstdint>

namespace vt {

struct ModelInfo;

// C from the model's shape (0 when it does not say): where a token's attention over its context
// equals the rest of its forward (see step_budget.cpp for the arithmetic).
int64_t attention_cost_context(const ModelInfo& info);

class StepBudget {
 public:
  // `context`: C (0: tokens alone, every token costs 1 and chunks never shrink). A step may cost
  // what `step_tokens` tokens cost at context C (2 units each), a prompt chunk what `prefill_chunk`
  // tokens do: below context C only the token budget binds, past it the cost does.
  StepBudget(int64_t context, int64_t step_tokens, int64_t prefill_chunk, int64_t min_chunk);
  StepBudget() = default;  // tokens alone, chunks of one token

  int64_t context() const { return context_; }
  double step_limit() const { return step_limit_; }
  double chunk_limit() const { return chunk_limit_; }
  // The cost of the tokens at positions [begin, end).
  double cost(int64_t begin, int64_t end) const;
  // How many tokens from position `begin` on fit in `cost` units (at most `most`).
  int64_t tokens_within(int64_t begin, double cost, int64_t most) const;
  // Where the prompt chunk that starts at `fed` ends. The chunks of each prefill_chunk-aligned
  // window are `piece(window)` tokens at the window's multiples of it, so every chunk boundary
  // depends on the position alone (a request's arithmetic does not depend on what else runs; a
  // prompt restored mid-chunk first completes its chunk) and every multiple of prefill_chunk is
  // one (prefix snapshots every prefix_snapshot_stride tokens).
  int64_t chunk_end(int64_t fed) const;
  // The chunk size in the window that starts at `window` (a multiple of prefill_chunk): the
  // largest prefill_chunk / k, rounded up to min_chunk, whose chunk ending at the window's end
  // (its costliest) stays within chunk_limit(), but at least min_chunk so prompts always advance.
  int64_t piece(int64_t window) const;

 private:
  int64_t context_ = 0, prefill_chunk_ = 1, min_chunk_ = 1;
  double step_limit_ = 2, chunk_limit_ = 2;
};

}  // namespace vt
