#include "speculative/draft_model_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace vt {

DraftModelDrafter::DraftModelDrafter(Model& model, const SamplingParams& sampling)
    : model_(model), sampler_(sampling), logits_(DType::kF32, {1, model.info().vocab_size}) {
  VT_CHECK(model.supports_rollback(), "draft model: ", model.info().architecture,
           " on this backend cannot roll back its sequence");
}

void DraftModelDrafter::start(std::span<const int32_t> prompt, int64_t max_length) {
  VT_CHECK(!prompt.empty(), "draft model: empty prompt");
  state_ = model_.new_sequence(max_length);
  model_.forward(prompt, *state_, logits_, {});
  ran_.assign(prompt.begin(), prompt.end());
}

int32_t DraftModelDrafter::pick(const float* logits, Draft& draft) {
  return pick_draft_token(sampler_, logits, model_.info().vocab_size, draft);
}

void DraftModelDrafter::propose(std::span<const int32_t> context, int64_t max_tokens,
                                Draft& draft) {
  VT_CHECK(state_, "draft model: propose before start");
  VT_CHECK(max_tokens >= 1, "draft model: max_tokens must be >= 1");
  draft.tokens.clear();
  draft.probs.clear();
  // Keep what agrees with the context, but run at least its last token: its logits give draft 1.
  const auto mismatch = std::mismatch(ran_.begin(), ran_.end(), context.begin(), context.end());
  const int64_t common =
      std::min<int64_t>(mismatch.first - ran_.begin(), int64_t(context.size()) - 1);
  model_.rollback(*state_, common);
  model_.commit(*state_);
  ran_.resize(common);

  // The context's new tokens are final (committed); the drafts run inside a rollback window.
  const auto fresh = context.subspan(common);
  model_.forward(fresh, *state_, logits_, {});
  ran_.insert(ran_.end(), fresh.begin(), fresh.end());
  ForwardOptions keep;
  keep.keep_rollback = true;
  keep.delta_rule = DeltaRuleChoice::kRecurrent;
  for (int64_t i = 0; i < max_tokens; ++i) {
    const int32_t token = pick(logits_.f32(), draft);
    draft.tokens.push_back(token);
    if (i + 1 == max_tokens || state_->length() == state_->capacity()) break;
    model_.forward(std::span<const int32_t>(&token, 1), *state_, logits_, keep);
    ran_.push_back(token);
  }
}

}  // namespace vt
