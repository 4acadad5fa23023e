#include "speculative/drafter.h"

#include "ops/sampling/sampler.h"

namespace vt {

int32_t pick_draft_token(Sampler& sampler, const float* logits, int64_t vocab, Draft& draft) {
  if (sampler.greedy()) return argmax(logits, vocab);
  std::vector<float> q;
  sampler.distribution(logits, vocab, q);
  const int32_t token = sampler.draw(q);
  draft.probs.insert(draft.probs.end(), q.begin(), q.end());
  return token;
}

}  // namespace vt
