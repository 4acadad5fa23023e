// The host-side plan of one prefill attention launch (prefill_sm90.cu, FlashInfer's sm90 kernel):
// which persistent CTA runs which (query tile, query head, sequence) work item, as the arrays
// FlashInfer's BatchPrefillPersistentTileScheduler reads. Pure C++ (no CUDA; C++17, as the CUDA
// sources include it): made on the host from the step's layout once per step, copied to the
// device, read by every attention layer.
#pragma once

#include <cstdint>
#include <vector>

namespace vt::cuda {

// Query rows per work item: FlashInfer's CTA_Q for head_dim 256 (prefill_sm90.cu asserts it).
constexpr int64_t kPrefillTileQ = 128;

// A sequence of the step that the prefill kernel serves: its new tokens [first_token,
// first_token + num_tokens) of the step, the keys they see in all (cached + new: its last token's
// position + 1), and its cache slot (its row of the block table).
struct PrefillSequence {
  int32_t first_token = 0, num_tokens = 0, num_keys = 0, slot = 0;
};

class PrefillAttentionPlan {
 public:
  // The packed arrays, int32: work_indptr [ctas + 1] (CTA c runs works [indptr[c], indptr[c+1])),
  // then one array per field, each [capacity] long.
  enum Field { kQTile, kQOffset, kKvOffset, kQLen, kKvLen, kHead, kSequence, kFields };

  // Room for steps of up to max_tokens tokens in up to max_seqs sequences, num_heads query heads,
  // on `ctas` persistent CTAs (the launch's grid: one per SM).
  PrefillAttentionPlan(int64_t num_heads, int64_t ctas, int64_t max_tokens, int64_t max_seqs);

  // Plans `sequences` (block-table rows of max_blocks entries; kv_offset is slot x max_blocks):
  // every (tile, head, sequence) once, the work items in the order heads, sequences by keys (most
  // first), tiles (last first), each to the CTA with the least work so far (cost 2 x tile rows +
  // keys seen; FlashInfer's PrefillSM90Plan heuristic). Deterministic; allocates nothing.
  void plan(const PrefillSequence* sequences, int64_t count, int64_t max_blocks);

  const std::vector<int32_t>& packed() const { return packed_; }
  int64_t offset(Field field) const { return ctas_ + 1 + int64_t(field) * capacity_; }
  const PrefillSequence* sequences() const {
    return sequences_.data();
  }  // the planned ones, in the step's order
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_heads() const { return num_heads_; }
  int64_t ctas() const { return ctas_; }
  int64_t capacity() const { return capacity_; }
  int64_t works() const { return works_; }
  int64_t tokens() const;  // the planned sequences' new tokens

 private:
  int64_t num_heads_, ctas_, max_seqs_, capacity_, works_ = 0, num_sequences_ = 0;
  std::vector<int32_t> packed_;
  std::vector<PrefillSequence> sequences_;
  std::vector<int32_t> order_;                     // sequences by keys, most first
  std::vector<std::pair<int64_t, int32_t>> heap_;  // (cost, cta), a min-heap
  std::vector<int32_t> work_cta_, cursor_;         // each work's CTA; each CTA's next slot
};

}  // namespace vt::cuda
