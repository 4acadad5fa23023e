// Speculative generation: a drafter proposes k tokens, the target verifies the last token plus
// the drafts in one forward, and rejection sampling keeps the output distribution exactly the
// target's (Leviathan et al. 2023); greedy decoding gives exactly the tokens of plain decoding.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "model/generate.h"
#include "model/model.h"
#include "speculative/drafter.h"

namespace vt {

struct SpeculativeOptions {
  int64_t num_draft = 4;  // k: most drafts verified per step
  // Adapt k in [1, num_draft] to the acceptance: +2 after a step that accepted every draft, -1
  // after one that rejected (the schedule of HF transformers' assisted generation).
  bool adaptive = false;
};

struct SpeculativeStats {
  int64_t num_draft = 0;
  int64_t steps = 0;                // target forwards after the prefill (verify steps)
  int64_t steps_without_draft = 0;  // of which the drafter proposed nothing (a plain decode step)
  int64_t drafted = 0, accepted = 0;
  int64_t emitted = 0;                      // tokens those steps produced
  std::vector<int64_t> accepted_histogram;  // [num_draft + 1]: steps by drafts accepted
  // [num_draft]: steps that drafted a token at position i (0 = first), and accepted it
  std::vector<int64_t> drafted_at, accepted_at;
  // Speculation by load (the serving engine's): a request's step verified its last token alone
  // because drafting did not pay at that load.
  int64_t declined_by_load = 0;

  double tokens_per_step() const { return steps ? double(emitted) / double(steps) : 0.0; }
  double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  // Empties the counters and sizes the per-position ones for k up to num_draft.
  void reset(int64_t num_draft);
  // One verify step that checked `drafted` drafts (<= num_draft), accepted the first `accepted`
  // and produced `emitted` tokens.
  void record_step(int64_t drafted, int64_t accepted, int64_t emitted);
};

// The adaptive schedule of k (SpeculativeOptions::adaptive): after a step that verified drafts,
// +2 when it accepted them all, else -1, within [1, k_max]; unchanged after a step without drafts.
int64_t adapt_num_draft(int64_t k, int64_t k_max, int64_t drafted, int64_t accepted);

struct SpeculativeResult : GenerateResult {
  SpeculativeStats stats;
};

// Like generate(): prefill, then steps until max_new_tokens or a stop token. The target must
// support rollback; the drafter's tokens must lie in the target's vocabulary.
SpeculativeResult generate_speculative(Model& target, Drafter& drafter,
                                       std::span<const int32_t> prompt,
                                       const GenerateOptions& options,
                                       const SpeculativeOptions& speculative,
                                       const std::function<void(int32_t)>& on_token = {});

// One verification decision, for tests and for the loop: accepts draft token `token` drawn from
// q (q_token: its probability; 1 for a deterministic drafter) against the target's p, else draws
// the replacement from max(0, p - q) normalised (q = null: a point mass at `token`). Returns the
// token emitted; *accepted says which happened.
int32_t verify_draft_token(Sampler& sampler, const std::vector<float>& p, const float* q,
                           int32_t token, bool* accepted);

// One verify step's decisions: `logits` holds the target's rows [draft.tokens.size() + 1, vocab]
// (row i: after the last token and drafts 0..i-1). Greedy samplers accept a draft that is the
// row's argmax; others use verify_draft_token with the draft's q. Each token produced (the
// accepted drafts, then the correction or, when all were accepted, the bonus token from the last
// row) goes to emit(token, its row), which returns false to stop there (a stop token, the
// length). Returns how many drafts were accepted (a draft that stopped the sequence counts).
int64_t verify_drafts(Sampler& sampler, const float* logits, int64_t vocab, const Draft& draft,
                      const std::function<bool(int32_t token, const float* row)>& emit);

}  // namespace vt
