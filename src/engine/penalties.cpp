#include "engine/penalties.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace vt {

void check_penalties(const Penalties& penalties) {
  VT_CHECK(penalties.presence >= -2 && penalties.presence <= 2, "presence_penalty ", penalties.presence,
           " must be in [-2, 2]");
  VT_CHECK(penalties.frequency >= -2 && penalties.frequency <= 2, "frequency_penalty ", penalties.frequency,
           " must be in [-2, 2]");
  VT_CHECK(std::isfinite(penalties.repetition) && penalties.repetition > 0, "repetition_penalty ",
           penalties.repetition, " must be finite and > 0");
}

PenaltyState::PenaltyState(const Penalties& penalties, std::span<const int32_t> prompt) : penalties_(penalties) {
  check_penalties(penalties);
  if (penalties.repetition == 1.0f) return;
  prompt_.assign(prompt.begin(), prompt.end());
  std::sort(prompt_.begin(), prompt_.end());
  prompt_.erase(std::unique(prompt_.begin(), prompt_.end()), prompt_.end());
}

void PenaltyState::add(int32_t token) {
  if (penalties_.any()) ++counts_[token];
}

void PenaltyState::apply(float* logits, int64_t vocab, std::span<const int32_t> drafted) const {
  if (!penalties_.any()) return;
  std::unordered_map<int32_t, int32_t> extra;  // the drafts' occurrences
  for (int32_t token : drafted) ++extra[token];
  const auto valid = [vocab](int32_t token) { return token >= 0 && token < vocab; };
  // Each token's update reads only its own logit: the maps' order does not matter.
  if (const float r = penalties_.repetition; r != 1.0f) {
    const auto scale = [&](int32_t token) {
      if (!valid(token)) return;
      float& logit = logits[token];
      logit = logit > 0 ? logit / r : logit * r;
    };
    const auto in_prompt = [&](int32_t token) { return std::binary_search(prompt_.begin(), prompt_.end(), token); };
    for (int32_t token : prompt_) scale(token);
    for (const auto& [token, count] : counts_)
      if (!in_prompt(token)) scale(token);
    for (const auto& [token, count] : extra)
      if (!in_prompt(token) && !counts_.count(token)) scale(token);
  }
  if (penalties_.presence == 0.0f && penalties_.frequency == 0.0f) return;
  const auto penalise = [&](int32_t token, int32_t count) {
    if (valid(token)) logits[token] -= penalties_.presence + penalties_.frequency * float(count);
  };
  for (const auto& [token, count] : counts_) {
    const auto drafts = extra.find(token);
    penalise(token, count + (drafts == extra.end() ? 0 : drafts->second));
  }
  for (const auto& [token, count] : extra)
    if (!counts_.count(token)) penalise(token, count);
}

}  // namespace vt
