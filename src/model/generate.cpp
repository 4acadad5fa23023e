#include "model/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace vt {

GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token) {
  VT_CHECK(!prompt.empty(), "generate: the prompt is empty");
  VT_CHECK(options.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
  const int64_t vocab = model.info().vocab_size;
  for (int32_t id : prompt)
    VT_CHECK(id >= 0 && id < vocab, "generate: prompt token id ", id, " is outside the vocabulary [0, ", vocab, ")");
  const int64_t capacity = int64_t(prompt.size()) + std::max<int64_t>(options.max_new_tokens, 1);
  VT_CHECK(capacity <= model.info().max_positions, "generate: prompt (", prompt.size(), ") + max_new_tokens (",
           options.max_new_tokens, ") exceeds the model's ", model.info().max_positions, " positions");

  auto state = model.new_sequence(capacity);
  Sampler sampler(options.sampling);
  Buffer logits(DType::kF32, {1, vocab});
  GenerateResult result;
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  model.forward(prompt, *state, logits, {});
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.keep_prompt_logits) result.prompt_logits.assign(logits.f32(), logits.f32() + vocab);

  start = Clock::now();
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    int32_t next = sampler.sample(logits.f32(), vocab);
    result.output_ids.push_back(next);
    if (on_token) on_token(next);
    if (std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), next) !=
        options.stop_token_ids.end())
      break;
    if (step + 1 == options.max_new_tokens) break;
    model.forward(std::span<const int32_t>(&next, 1), *state, logits, {});
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace vt
