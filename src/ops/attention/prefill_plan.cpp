// The prefill attention kernel's work plan (prefill_plan.h): longest-processing-time-first over
// the persistent CTAs, as FlashInfer's PrefillSM90Plan does for its sm90 kernel.
#include "ops/attention/prefill_plan.h"

#include <algorithm>
#include <functional>

#include "core/error.h"

namespace vt::cuda {

PrefillAttentionPlan::PrefillAttentionPlan(int64_t num_heads, int64_t ctas, int64_t max_tokens,
                                           int64_t max_seqs)
    : num_heads_(num_heads),
      ctas_(ctas),
      max_seqs_(max_seqs),
      // sum over sequences of ceil(q_len / tile) <= max_tokens / tile + max_seqs
      capacity_(num_heads * ((max_tokens + kPrefillTileQ - 1) / kPrefillTileQ + max_seqs)) {
  VT_CHECK(num_heads >= 1 && ctas >= 1 && max_tokens >= 1 && max_seqs >= 1,
           "prefill plan: ", num_heads, " heads, ", ctas, " CTAs, ", max_tokens, " tokens, ",
           max_seqs, " sequences");
  packed_.assign(size_t(ctas_ + 1 + kFields * capacity_), 0);
  sequences_.resize(size_t(max_seqs_));
  order_.resize(size_t(max_seqs_));
  heap_.resize(size_t(ctas_));
  work_cta_.resize(size_t(capacity_));
  cursor_.resize(size_t(ctas_));
}

int64_t PrefillAttentionPlan::tokens() const {
  int64_t total = 0;
  for (int64_t s = 0; s < num_sequences_; ++s) total += sequences_[size_t(s)].num_tokens;
  return total;
}

void PrefillAttentionPlan::plan(const PrefillSequence* sequences, int64_t count,
                                int64_t max_blocks) {
  VT_CHECK(count >= 0 && count <= max_seqs_, "prefill plan: ", count, " sequences, room for ",
           max_seqs_);
  num_sequences_ = count;
  int64_t tiles = 0;
  for (int64_t s = 0; s < count; ++s) {
    const PrefillSequence& sequence = sequences[s];
    VT_CHECK(
        sequence.num_tokens >= 1 && sequence.num_keys >= sequence.num_tokens && sequence.slot >= 0,
        "prefill plan: sequence ", s, " has ", sequence.num_tokens, " tokens seeing ",
        sequence.num_keys, " keys");
    sequences_[size_t(s)] = sequence;
    order_[size_t(s)] = int32_t(s);
    tiles += (sequence.num_tokens + kPrefillTileQ - 1) / kPrefillTileQ;
  }
  works_ = tiles * num_heads_;
  VT_CHECK(works_ <= capacity_, "prefill plan: ", works_, " work items, room for ", capacity_);
  std::sort(order_.begin(), order_.begin() + num_sequences_, [&](int32_t a, int32_t b) {
    return sequences_[size_t(a)].num_keys != sequences_[size_t(b)].num_keys
               ? sequences_[size_t(a)].num_keys > sequences_[size_t(b)].num_keys
               : a < b;
  });

  // Pass 1: each work item (in the order above) to the least-loaded CTA (ties: the lower index).
  for (int64_t c = 0; c < ctas_; ++c) heap_[size_t(c)] = {0, int32_t(c)};
  const auto greater = std::greater<std::pair<int64_t, int32_t>>();
  std::fill(cursor_.begin(), cursor_.end(), 0);
  int64_t work = 0;
  const auto each_work = [&](auto&& visit) {
    for (int64_t head = 0; head < num_heads_; ++head)
      for (int64_t i = 0; i < num_sequences_; ++i) {
        const int32_t s = order_[size_t(i)];
        const PrefillSequence& sequence = sequences_[size_t(s)];
        const int64_t num_tiles = (sequence.num_tokens + kPrefillTileQ - 1) / kPrefillTileQ;
        for (int64_t tile = num_tiles - 1; tile >= 0; --tile)
          visit(head, s, sequence, tile, num_tiles);
      }
  };
  each_work(
      [&](int64_t, int32_t, const PrefillSequence& sequence, int64_t tile, int64_t num_tiles) {
        // The keys this tile's causal rows see at most (its last row's), all of them for the last
        // tile.
        const int64_t keys = tile + 1 == num_tiles
                                 ? sequence.num_keys
                                 : std::clamp<int64_t>(sequence.num_keys - sequence.num_tokens +
                                                           (tile + 1) * kPrefillTileQ,
                                                       0, sequence.num_keys);
        std::pop_heap(heap_.begin(), heap_.end(), greater);
        auto& [cost, cta] = heap_.back();
        work_cta_[size_t(work++)] = cta;
        ++cursor_[size_t(cta)];
        cost += 2 * kPrefillTileQ + keys;
        std::push_heap(heap_.begin(), heap_.end(), greater);
      });

  // Pass 2: the work items grouped by CTA, in the order each CTA was given them.
  int32_t* indptr = packed_.data();
  indptr[0] = 0;
  for (int64_t c = 0; c < ctas_; ++c) {
    indptr[c + 1] = indptr[c] + cursor_[size_t(c)];
    cursor_[size_t(c)] = indptr[c];
  }
  work = 0;
  each_work([&](int64_t head, int32_t s, const PrefillSequence& sequence, int64_t tile, int64_t) {
    const int64_t slot = cursor_[size_t(work_cta_[size_t(work++)])]++;
    const int32_t fields[kFields] = {int32_t(tile),
                                     sequence.first_token,
                                     int32_t(sequence.slot * max_blocks),
                                     sequence.num_tokens,
                                     sequence.num_keys,
                                     int32_t(head),
                                     s};
    for (int f = 0; f < kFields; ++f) packed_[size_t(offset(Field(f)) + slot)] = fields[f];
  });
}

}  // namespace vt::cuda
