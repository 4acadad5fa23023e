// The engine's view of one request (engine.cpp, engine_prefix.cpp): its tokens, state, sampler,
// stream filters and speculative drafts.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace vt {

struct Engine::Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // the prompt, then each generated token
  int64_t prompt_size = 0;
  RequestParams params;
  TokenCallback callback;
  std::unique_ptr<SequenceState> state;  // made at admission
  Sampler sampler;
  std::unique_ptr<StreamingDetokenizer> detokenizer;  // null without a tokenizer
  StopStringFilter stop_filter;
  int64_t fed = 0;          // tokens through forward so far
  int64_t fed_most = 0;     // the most tokens ever fed and kept (re-fed below it after a preemption)
  int64_t step_tokens = 0;  // tokens scheduled this step
  int64_t preemptions = 0;  // times sent back to the queue (then re-fed from token 0)
  int64_t cached = 0;       // prompt tokens restored from the prefix cache at the first admission
  bool finished = false;
  TokenEvent final_event;  // delivered once the cache entries are freed
  // Speculative decoding (params.num_draft > 0): the drafter, the k of the next step (adaptive:
  // in [1, num_draft]), and this step's verify (the last token, then the drafts).
  std::unique_ptr<Drafter> drafter;
  bool drafter_started = false;
  // The drafter reads the target's hidden states (MTP): forwards keep those it has yet to read.
  bool keep_hidden = false;
  int64_t num_draft = 0;
  int64_t verifies_with_drafts = 0, drafts_accepted = 0;  // its acceptance, for speculation by load
  bool declined_by_load = false;  // verifies its last token alone this step
  bool verifying = false;
  Draft draft;
  int64_t drafted_for = -1;  // the context length `draft` follows (a waiting verify keeps it)
  std::vector<int32_t> verify_tokens;
  std::unique_ptr<TokenConstraint> constraint;  // structured output: masks every sampled row
  PenaltyState penalty_state;  // params.penalties' counts

  Sequence(const RequestParams& request, const Tokenizer* tokenizer)
      : params(request), sampler(request.sampling), stop_filter(request.stop_strings) {
    if (tokenizer) detokenizer = std::make_unique<StreamingDetokenizer>(*tokenizer, /*skip_special_tokens=*/true);
  }
  int64_t completion_tokens() const { return int64_t(tokens.size()) - prompt_size; }
  // Drafts the next verify would ask for: k, less what max_tokens leaves room for.
  int64_t drafts_wanted() const { return std::min(num_draft, params.max_tokens - completion_tokens() - 1); }
  // An event carrying the request's token counts (its usage so far); `ending` is its last one.
  TokenEvent counted() const {
    TokenEvent event;
    event.prompt_tokens = prompt_size;
    event.cached_tokens = cached;
    event.completion_tokens = completion_tokens();  // preempted and cancelled ones may have some
    return event;
  }
  TokenEvent ending(FinishReason reason, std::string error = {}) const {
    TokenEvent event = counted();
    event.finished = true;
    event.finish_reason = reason;
    event.error = std::move(error);
    return event;
  }
  // Past the prompt, tokens are fed one per forward (as decode fed them), so after a preemption
  // the re-fed generated tokens give the same state, bit for bit, as the first time (the CPU
  // reference's verify steps compute each token as a one-token forward does).
  bool decoding() const { return fed >= prompt_size; }
  // Caught up (only the last token unfed) and speculating: the next step verifies drafts.
  bool verifies_next() const { return drafter && decoding() && fed + 1 == int64_t(tokens.size()); }
};

}  // namespace vt
