// Speculative generation: a drafter proposes k tokens, the target verifies the last token plus
// the drafts in one forward, and rejection sampling keeps the output distribution exactly the
// target's (Leviathan et al. 2023); greedy decoding gives exactly the tokens of plain decoding.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "engine/generate.h"
#include "model/model.h"
#include "spec/drafter.h"

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

  double tokens_per_step() const { return steps ? double(emitted) / double(steps) : 0.0; }
  double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
};

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

}  // namespace vt
