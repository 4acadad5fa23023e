// A per-request rule on which tokens a sequence may take next (structured output: a grammar's
// token mask). The engine masks a row's logits before sampling it, and tells the rule each token
// taken; speculative drafts are checked against it and the rejected ones rolled back.
#pragma once

#include <cstdint>

namespace vt {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of the tokens not allowed next to -inf (F32 [vocab_size]).
  virtual void mask(float* logits, int64_t vocab_size) = 0;
  // Takes a token; false (nothing changed) when the rule does not allow it.
  virtual bool accept(int32_t token) = 0;
  // Forgets the last `count` tokens taken.
  virtual void rollback(int count) = 0;
};

}  // namespace vt
