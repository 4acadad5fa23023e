#include "speculative/ngram_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace vt {

NgramDrafter::NgramDrafter(const NgramOptions& options) : options_(options) {
  VT_CHECK(options.min_n >= 1 && options.max_n >= options.min_n, "ngram drafter: need 1 <= min_n (",
           options.min_n, ") <= max_n (", options.max_n, ")");
}

void NgramDrafter::propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) {
  draft.tokens.clear();
  draft.probs.clear();
  const int64_t size = int64_t(context.size());
  for (int64_t n = std::min(options_.max_n, size - 1); n >= options_.min_n; --n) {
    const auto suffix = context.subspan(size - n);
    // Occurrences starting at i < size - n, so at least one token follows each.
    for (int64_t i = size - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + i)) continue;
      const int64_t begin = i + n, end = std::min(size, begin + max_tokens);
      draft.tokens.assign(context.begin() + begin, context.begin() + end);
      return;
    }
  }
}

}  // namespace vt
