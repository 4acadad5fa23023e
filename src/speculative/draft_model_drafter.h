// Draft-model drafter: a smaller vt model sharing the target's vocabulary runs ahead
// autoregressively on its own sequence and is rolled back to what the target accepted.
#pragma once

#include <memory>

#include "core/tensor.h"
#include "model/model.h"
#include "ops/sampling/sampler.h"
#include "speculative/drafter.h"

namespace vt {

class DraftModelDrafter final : public Drafter {
 public:
  // Drafts greedily when `sampling` is greedy; otherwise samples with it and reports q (use the
  // target's temperature / top-k / top-p, with another seed). The model must support rollback.
  DraftModelDrafter(Model& model, const SamplingParams& sampling);
  std::string name() const override { return "draft"; }
  // Makes the draft sequence and prefills the prompt.
  void start(std::span<const int32_t> prompt, int64_t max_length) override;
  // Rolls back to the longest common prefix of what it ran and `context`, runs the rest of the
  // context, then max_tokens - 1 of its own drafts (the last draft is not run).
  void propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) override;

 private:
  int32_t pick(const float* logits, Draft& draft);  // next draft token (+ its q when sampling)

  Model& model_;
  Sampler sampler_;
  std::unique_ptr<SequenceState> state_;
  std::vector<int32_t> ran_;  // the tokens state_ holds
  Buffer logits_;             // [1, vocab]
};

}  // namespace vt
