// Whether speculation pays at the load now running. A decode step of T tokens costs the model's
// forward time t(T): about flat while reading the weights dominates (small batches on a GPU),
// growing with T once compute does (large batches; the CPU). Drafting k tokens for a sequence
// adds k tokens to the step and gives it 1 + (its mean accepted drafts) tokens instead of 1.
// SpeculationLoadPolicy measures t(T) from the engine's steps without prompt tokens (a moving
// average per token count) and lets the sequences with the best acceptance per draft speculate,
// as many as make the most tokens per second; the others decode one token. A token count never
// measured reads as the nearest measured one (flat: trying it is what measures it); the policy
// takes the other choice once when no step within a factor of two of its tokens was measured,
// and every kExploreEvery decisions in any case, so both sides stay measured.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace vt {

class SpeculationLoadPolicy {
 public:
  static constexpr int64_t kExploreEvery = 16;

  // Token counts up to `max_tokens` (the engine's step budget) are tracked.
  explicit SpeculationLoadPolicy(int64_t max_tokens);

  // A step of `tokens` decode and verify tokens (no prompt tokens) whose forwards took `seconds`.
  void observe_step(int64_t tokens, double seconds);
  // The measured forward time of a step of `tokens` tokens (nearest measured count; 1 if none).
  double cost(int64_t tokens) const;

  struct Candidate {
    int64_t drafts = 0;           // what the sequence would verify besides its last token
    double mean_accepted = 0.0;   // drafts it accepts per verify step (measured, or a prior)
  };
  // `fixed_tokens` tokens of the step (and the `fixed_emitted` tokens they make) are not the
  // policy's to choose (plain decodes, speculation that must stay as asked); returns, for each
  // candidate, whether it drafts this step.
  std::vector<bool> choose(int64_t fixed_tokens, double fixed_emitted, std::span<const Candidate> candidates);

  int64_t decisions() const { return decisions_; }
  int64_t declined() const { return declined_; }  // candidates told not to draft, in all

 private:
  bool measured_near(int64_t tokens) const;  // a count in [tokens / 2, 2 tokens] has a cost

  std::vector<double> seconds_;  // by token count; < 0: not measured
  int64_t decisions_ = 0, declined_ = 0;
};

}  // namespace vt
