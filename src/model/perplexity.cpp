// Perplexity over independent windows: one prefill per window, log-softmax in double.
#include "model/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace vt {

PerplexityResult perplexity(Model& model, std::span<const int32_t> ids, int64_t context,
                            const std::function<void(int64_t, int64_t)>& on_window) {
  VT_CHECK(context >= 2, "perplexity: context must be at least 2 tokens, got ", context);
  VT_CHECK(context <= model.info().max_positions, "perplexity: context ", context, " exceeds the model's ",
           model.info().max_positions, " positions");
  VT_CHECK(ids.size() >= 2, "perplexity: need at least 2 tokens, got ", ids.size());
  const int64_t vocab = model.info().vocab_size, total = int64_t(ids.size());
  const int64_t windows = (total + context - 1) / context;
  PerplexityResult result;
  const auto start = std::chrono::steady_clock::now();
  Buffer logits(DType::kF32, {context, vocab});
  ForwardOptions options;
  options.all_logits = true;
  for (int64_t w = 0; w < windows; ++w) {
    const int64_t begin = w * context, length = std::min(context, total - begin);
    if (length >= 2) {
      auto window = ids.subspan(size_t(begin), size_t(length));
      auto state = model.new_sequence(length);
      TensorView rows = logits.view().rows(0, length);
      model.forward(window, *state, rows, options);
      // log p(next) = logit[next] - logsumexp(logits), in double.
      for (int64_t t = 0; t + 1 < length; ++t) {
        const float* row = rows.f32() + t * vocab;
        const float max_logit = *std::max_element(row, row + vocab);
        double sum = 0;
        for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - max_logit);
        const int32_t next = window[size_t(t + 1)];
        result.nll_sum -= double(row[next]) - max_logit - std::log(sum);
      }
      result.predicted_tokens += length - 1;
      ++result.windows;
    }
    if (on_window) on_window(w + 1, windows);
  }
  result.perplexity = std::exp(result.nll_sum / double(result.predicted_tokens));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace vt
