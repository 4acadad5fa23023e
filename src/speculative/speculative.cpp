#include "speculative/speculative.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace vt {

int32_t verify_draft_token(Sampler& sampler, const std::vector<float>& p, const float* q,
                           int32_t token, bool* accepted) {
  const double q_token = q ? q[token] : 1.0;
  VT_CHECK(q_token > 0, "speculative: the drafter proposed token ", token, " with probability 0");
  // Accept with probability min(1, p / q).
  *accepted = sampler.uniform() * q_token < double(p[token]);
  if (*accepted) return token;
  std::vector<float> residual(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    residual[i] = std::max(0.0f, p[i] - (q ? q[i] : float(int32_t(i) == token)));
  double total = 0;
  for (float r : residual) total += r;
  // p <= q everywhere means p == q: rejection had probability 0 but rounding can land here.
  return total > 0 ? sampler.draw(residual) : sampler.draw(p);
}

void SpeculativeStats::reset(int64_t max_draft) {
  *this = SpeculativeStats();
  num_draft = max_draft;
  accepted_histogram.assign(size_t(max_draft + 1), 0);
  drafted_at.assign(size_t(max_draft), 0);
  accepted_at.assign(size_t(max_draft), 0);
}

void SpeculativeStats::record_step(int64_t num_drafts, int64_t num_accepted, int64_t num_emitted) {
  VT_CHECK(num_drafts >= 0 && num_drafts <= num_draft && num_accepted >= 0 && num_accepted <= num_drafts,
           "speculative stats: ", num_accepted, " of ", num_drafts, " drafts accepted (k up to ", num_draft, ")");
  ++steps;
  steps_without_draft += num_drafts == 0;
  drafted += num_drafts;
  accepted += num_accepted;
  emitted += num_emitted;
  ++accepted_histogram[size_t(num_accepted)];
  for (int64_t i = 0; i < num_drafts; ++i) ++drafted_at[size_t(i)];
  for (int64_t i = 0; i < num_accepted; ++i) ++accepted_at[size_t(i)];
}

int64_t adapt_num_draft(int64_t k, int64_t k_max, int64_t drafted, int64_t accepted) {
  if (drafted == 0) return k;
  return accepted == drafted ? std::min(k + 2, k_max) : std::max<int64_t>(k - 1, 1);
}

int64_t verify_drafts(Sampler& sampler, const float* logits, int64_t vocab, const Draft& draft,
                      const std::function<bool(int32_t token, const float* row)>& emit) {
  const int64_t num_drafts = int64_t(draft.tokens.size());
  std::vector<float> p;
  for (int64_t accepted = 0; accepted < num_drafts; ++accepted) {
    const float* row = logits + accepted * vocab;
    const int32_t token = draft.tokens[size_t(accepted)];
    bool accept = false;
    int32_t emitted = 0;
    if (sampler.greedy()) {
      emitted = argmax(row, vocab);
      accept = emitted == token;
    } else {
      sampler.distribution(row, vocab, p);
      const float* q = draft.probs.empty() ? nullptr : draft.probs.data() + accepted * vocab;
      emitted = verify_draft_token(sampler, p, q, token, &accept);
    }
    const bool go_on = emit(emitted, row);
    if (!accept) return accepted;
    if (!go_on) return accepted + 1;
  }
  // Every draft accepted: the last row's logits give one more token for free.
  const float* last = logits + num_drafts * vocab;
  emit(sampler.sample(last, vocab), last);
  return num_drafts;
}

SpeculativeResult generate_speculative(Model& target, Drafter& drafter,
                                       std::span<const int32_t> prompt,
                                       const GenerateOptions& options,
                                       const SpeculativeOptions& speculative,
                                       const std::function<void(int32_t)>& on_token) {
  VT_CHECK(!prompt.empty(), "generate: the prompt is empty");
  VT_CHECK(options.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
  VT_CHECK(speculative.num_draft >= 1, "speculative: num_draft must be >= 1, got ",
           speculative.num_draft);
  VT_CHECK(target.supports_rollback(), "speculative: ", target.info().architecture,
           " on this backend cannot roll back a sequence");
  const int64_t vocab = target.info().vocab_size, k_max = speculative.num_draft;
  for (int32_t id : prompt)
    VT_CHECK(id >= 0 && id < vocab, "generate: prompt token id ", id,
             " is outside the vocabulary [0, ", vocab, ")");
  // A step runs the last token and at most (tokens still to make - 1) drafts, so the sequence
  // never holds more than prompt + max_new_tokens - 1 tokens, as in plain decoding.
  const int64_t capacity = int64_t(prompt.size()) + std::max<int64_t>(options.max_new_tokens, 1);
  VT_CHECK(capacity <= target.info().max_positions, "generate: prompt (", prompt.size(),
           ") + max_new_tokens (", options.max_new_tokens, ") exceeds the model's ",
           target.info().max_positions, " positions");

  auto state = target.new_sequence(capacity);
  Sampler sampler(options.sampling);
  Buffer logits(DType::kF32, {k_max + 1, vocab});
  SpeculativeResult result;
  SpeculativeStats& stats = result.stats;
  stats.reset(k_max);

  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  target.forward(prompt, *state, logits.view().rows(0, 1), {});
  drafter.start(prompt, capacity + k_max);
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.keep_prompt_logits) result.prompt_logits.assign(logits.f32(), logits.f32() + vocab);

  start = Clock::now();
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  bool stopped = false;
  auto emit = [&](int32_t token) {
    context.push_back(token);
    result.output_ids.push_back(token);
    if (on_token) on_token(token);
    stopped = std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), token) !=
                  options.stop_token_ids.end() ||
              int64_t(result.output_ids.size()) == options.max_new_tokens;
  };
  if (options.max_new_tokens > 0)
    emit(sampler.sample(logits.f32(), vocab));
  else
    stopped = true;

  Draft draft;
  std::vector<int32_t> tokens;
  ForwardOptions verify;
  verify.all_logits = true;
  verify.delta_rule = DeltaRuleChoice::kRecurrent;  // per token, as decoding: the same numbers
  int64_t k = k_max;
  while (!stopped) {
    const int64_t remaining = options.max_new_tokens - int64_t(result.output_ids.size());
    draft.tokens.clear();
    draft.probs.clear();
    if (const int64_t budget = std::min(k, remaining - 1); budget > 0)
      drafter.propose(context, budget, draft);
    const int64_t num_drafts = int64_t(draft.tokens.size());
    VT_CHECK(num_drafts <= std::min(k, remaining - 1), "speculative: ", drafter.name(),
             " proposed ", num_drafts, " tokens, more than asked");
    VT_CHECK(draft.probs.empty() || int64_t(draft.probs.size()) == num_drafts * vocab,
             "speculative: ", drafter.name(), " gave q of ", draft.probs.size(), " values for ",
             num_drafts, " tokens of vocab ", vocab);
    for (int32_t id : draft.tokens)
      VT_CHECK(id >= 0 && id < vocab, "speculative: ", drafter.name(), " proposed token ", id,
               " outside the target's vocabulary [0, ", vocab, ")");

    tokens.assign(1, context.back());
    tokens.insert(tokens.end(), draft.tokens.begin(), draft.tokens.end());
    const int64_t length = state->length(), num_tokens = int64_t(tokens.size());
    verify.keep_rollback = num_drafts > 0;
    target.forward(tokens, *state, logits.view().rows(0, num_tokens), verify);

    const int64_t emitted_before = int64_t(result.output_ids.size());
    const int64_t accepted = verify_drafts(sampler, logits.f32(), vocab, draft, [&](int32_t token, const float*) {
      emit(token);
      return !stopped;
    });
    stats.record_step(num_drafts, accepted, int64_t(result.output_ids.size()) - emitted_before);

    // Keep the last token and the accepted drafts; the token just emitted runs next step.
    if (num_drafts > 0) {
      target.rollback(*state, length + 1 + accepted);
      target.commit(*state);
    }
    if (speculative.adaptive) k = adapt_num_draft(k, k_max, num_drafts, accepted);
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace vt
