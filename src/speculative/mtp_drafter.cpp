#include "speculative/mtp_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace vt {

MtpDrafter::MtpDrafter(MtpHead& target, const SamplingParams& sampling, MtpHiddenSource source)
    : target_(target), source_(source), sampler_(sampling),
      logits_(DType::kF32, {1, target.info().vocab_size}) {
  VT_CHECK(target.has_mtp(), "MTP drafter: ", target.info().architecture,
           " was loaded without its MTP head (load it with load_mtp)");
  VT_CHECK(source_ == MtpHiddenSource::kLastForward || target.keeps_sequence_hidden_states(),
           "MTP drafter: ", target.info().architecture,
           " on this backend keeps no hidden states per sequence (batched MTP drafting)");
  if (source_ == MtpHiddenSource::kLastForward) target_.set_keep_hidden_states(true);
}

MtpDrafter::~MtpDrafter() {
  if (source_ == MtpHiddenSource::kLastForward) target_.set_keep_hidden_states(false);
}

void MtpDrafter::start(std::span<const int32_t> prompt, int64_t max_length) {
  VT_CHECK(!prompt.empty(), "MTP drafter: empty prompt");
  state_.reset();  // first: a backend with a fixed number of sequences may need its slot
  // The head's entries run up to k - 1 chained drafts past the context; where the model's
  // positions end first, the chain stops early (propose checks the capacity).
  state_ = target_.new_mtp_sequence(std::min(max_length, target_.info().max_positions));
  pairs_ = 0;
}

int32_t MtpDrafter::pick(const float* logits, Draft& draft) {
  return pick_draft_token(sampler_, logits, target_.info().vocab_size, draft);
}

void MtpDrafter::catch_up(std::span<const int32_t> context, int64_t fed) {
  VT_CHECK(state_, "MTP drafter: catch_up before start");
  // kLastForward: the states of one forward, which only a propose after it can read.
  if (source_ != MtpHiddenSource::kSequence) return;
  VT_CHECK(target_sequence_, "MTP drafter: no target sequence set");
  VT_CHECK(fed >= 0 && fed <= int64_t(context.size()), "MTP drafter: ", fed, " tokens fed of a context of ",
           context.size());
  // Pairs [pairs_, end): the hidden state at p kept (p < fed), the token at p + 1 in the context.
  const PositionRange kept = target_.sequence_hidden_positions(*target_sequence_);
  const int64_t end = std::min({kept.end(), fed, int64_t(context.size()) - 1});
  if (end <= pairs_) return;
  VT_CHECK(kept.contains(pairs_, end - pairs_), "MTP drafter: the target sequence keeps the hidden states of positions [",
           kept.start, ", ", kept.end(), "), catching up needs [", pairs_, ", ", end, ")");
  target_.mtp_rollback(*state_, pairs_);  // chained entries of a propose before
  target_.mtp_forward_from_sequence(context.subspan(size_t(pairs_ + 1), size_t(end - pairs_)), pairs_,
                                    *target_sequence_, *state_, logits_);
  pairs_ = end;
}

void MtpDrafter::propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) {
  VT_CHECK(state_, "MTP drafter: propose before start");
  VT_CHECK(max_tokens >= 1, "MTP drafter: max_tokens must be >= 1");
  draft.tokens.clear();
  draft.probs.clear();
  // New pairs: positions [pairs_, last], hidden at p with context[p + 1].
  const int64_t last = int64_t(context.size()) - 2;
  VT_CHECK(last >= pairs_, "MTP drafter: a context of ", context.size(),
           " tokens is not longer than the ", pairs_ + 1, " already run");
  const bool sequence = source_ == MtpHiddenSource::kSequence;
  VT_CHECK(!sequence || target_sequence_, "MTP drafter: no target sequence set");
  const PositionRange kept = sequence ? target_.sequence_hidden_positions(*target_sequence_)
                                      : target_.kept_hidden_positions();
  VT_CHECK(kept.contains(pairs_, last + 1 - pairs_), "MTP drafter: the target ",
           sequence ? "sequence keeps" : "'s last forward kept", " the hidden states of positions [",
           kept.start, ", ", kept.end(), "), the context needs [", pairs_, ", ", last + 1, "]",
           sequence ? "" : ": propose after every target forward");
  target_.mtp_rollback(*state_, pairs_);  // the chained drafts' entries of the last call

  const int64_t num_pairs = last + 1 - pairs_;
  const auto tokens = context.subspan(size_t(pairs_ + 1), size_t(num_pairs));
  if (sequence) {
    target_.mtp_forward_from_sequence(tokens, pairs_, *target_sequence_, *state_, logits_);
  } else {
    target_.mtp_forward_from_target(tokens, pairs_, *state_, logits_);
  }
  pairs_ = last + 1;

  // Chain: each draft with the head's own hidden state (lm_head input) of the step that made it.
  for (int64_t i = 0; i < max_tokens; ++i) {
    const int32_t token = pick(logits_.f32(), draft);
    draft.tokens.push_back(token);
    if (i + 1 == max_tokens || state_->length() == state_->capacity()) break;
    target_.mtp_forward_chained(token, *state_, logits_);
  }
}

}  // namespace vt
