// MTP drafter: the checkpoint's multi-token-prediction head proposes from the target's last
// hidden state and the last token, then chains on its own hidden state for k > 1. Runs on any
// model that implements MtpHead (model/mtp_head.h): the CPU reference and the CUDA model.
#pragma once

#include <memory>

#include "model/mtp_head.h"
#include "ops/sampling/sampler.h"
#include "speculative/drafter.h"

namespace vt {

// Where the drafter finds the target's hidden states: kLastForward (one sequence, vt generate:
// the model keeps those of its last forward, turned on while the drafter lives) or kSequence (the
// serving engine's batches: those the engine's target sequence keeps, set_target_sequence).
enum class MtpHiddenSource { kLastForward, kSequence };

class MtpDrafter final : public Drafter {
 public:
  // `target` is the model being verified, loaded with its MTP head (load_mtp). Drafts greedily
  // when `sampling` is greedy; otherwise samples with it and reports q.
  MtpDrafter(MtpHead& target, const SamplingParams& sampling,
             MtpHiddenSource source = MtpHiddenSource::kLastForward);
  ~MtpDrafter() override;
  std::string name() const override { return "mtp"; }
  bool reads_target_sequence() const override { return source_ == MtpHiddenSource::kSequence; }
  void set_target_sequence(SequenceState* target) override { target_sequence_ = target; }
  // The next pair's position: the head has run the pairs of every position before it.
  int64_t target_hidden_needed_from() const override { return pairs_; }
  // kSequence: runs the pairs whose hidden states the target sequence keeps and whose next token
  // the context holds (a prompt chunk's, while the prompt is fed), so the sequence drops them.
  void catch_up(std::span<const int32_t> context, int64_t fed) override;
  // Makes the head's KV cache; the target's prefill must run with this drafter alive.
  void start(std::span<const int32_t> prompt, int64_t max_length) override;
  // Drops the previous call's chained entries, runs the pairs (target hidden at p, context token
  // at p + 1) the context adds, whose hidden states the target's last forward kept (so call it
  // after each target forward; kSequence: kept since the last call or catch_up), then chains
  // max_tokens - 1 steps on its own output.
  void propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) override;

 private:
  int32_t pick(const float* logits, Draft& draft);  // next draft token (+ its q when sampling)

  MtpHead& target_;
  MtpHiddenSource source_;
  SequenceState* target_sequence_ = nullptr;  // kSequence: the target's sequence, set before propose
  Sampler sampler_;
  std::unique_ptr<SequenceState> state_;
  int64_t pairs_ = 0;  // positions whose target pair the head's cache holds (chained ones after)
  Buffer logits_;      // [1, vocab]
};

}  // namespace vt
