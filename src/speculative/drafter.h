// Drafters for speculative decoding: cheap guesses of the next tokens, verified by the target
// model in one forward (speculative/speculative.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace vt {

// What a drafter proposes to follow a context.
struct Draft {
  std::vector<int32_t> tokens;
  // [tokens.size(), vocab] row-major: the distribution q each token was drawn from (given the
  // context and the earlier drafts). Empty when the drafter is deterministic: q is then a point
  // mass at the token.
  std::vector<float> probs;
};

class Sampler;
class SequenceState;

// The next draft token from a draft distribution's logits [vocab]: the argmax when `sampler` is
// greedy, else a draw from its distribution q, whose row is appended to draft.probs.
int32_t pick_draft_token(Sampler& sampler, const float* logits, int64_t vocab, Draft& draft);

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // Called once per generation with the prompt, before any proposal; no context will exceed
  // max_length tokens, drafts included.
  virtual void start(std::span<const int32_t> prompt, int64_t max_length) = 0;
  // Proposes at most max_tokens (>= 1) tokens to follow `context`: the prompt and every token
  // produced so far. Each context extends the previous one by some of the tokens last proposed
  // (the accepted ones) and one token of the target's.
  virtual void propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) = 0;

  // In the serving engine (forward_batch), for drafters that read the target's hidden states
  // (MTP): true asks the forwards of the request's target sequence to keep them
  // (BatchItem::keep_hidden) from target_hidden_needed_from() on, and before each propose or
  // catch_up the engine names that sequence (a new one after a preemption, which re-feeds the
  // tokens).
  virtual bool reads_target_sequence() const { return false; }
  virtual void set_target_sequence(SequenceState* target) { (void)target; }
  // The first position whose hidden state the drafter has yet to read (it read all before): a
  // forward that ends at or below it need not keep its own (tokens re-fed after a preemption).
  virtual int64_t target_hidden_needed_from() const { return 0; }
  // Before a step in which no propose precedes the request's forwards (its prompt is still being
  // fed, or it makes its last token): reads the hidden states the target sequence keeps of the
  // first `fed` tokens of `context`, as far as the context holds the token that follows each, so
  // that the sequence keeps at most what one step adds. Drafters that read no target sequence
  // have nothing to do.
  virtual void catch_up(std::span<const int32_t> context, int64_t fed) { (void)context, (void)fed; }
};

}  // namespace vt
