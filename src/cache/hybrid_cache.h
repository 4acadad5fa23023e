// The hybrid cache's bookkeeping: a pool of fixed-size KV blocks (attention layers) and a pool of
// recurrent-state slots (Gated DeltaNet layers). A sequence is admitted only when both fit for
// its prompt plus its max_tokens reservation, so a step never runs out of either mid-flight.
// Memory itself is allocated once by the model; this class hands out indices into it. A model
// whose sequences live in such a pool (the CUDA runner's device cache) owns the one instance and
// hands it out (Model::kv_cache()), so the engine's admission and growth are the device's blocks.
// Blocks are reference counted: a prefix-cache entry keeps the full blocks of the tokens it saved,
// and a sequence that starts from it holds the same blocks at the head of its table. A block with
// more than one owner is read-only: a sequence writes only the blocks it alone holds (exclusive).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace vt {

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);
  int64_t size() const { return int64_t(ref_counts_.size()); }
  int64_t free_count() const { return int64_t(free_.size()); }
  // Takes `count` blocks, or none (std::nullopt) when fewer are free; a fresh pool hands out
  // 0, 1, 2, ... (runs of adjacent blocks copy as one span).
  std::optional<std::vector<int32_t>> allocate(int64_t count);
  void retain(int32_t block);   // another owner (a shared prefix)
  void release(int32_t block);  // back to the pool when the last owner lets go
  int32_t ref_count(int32_t block) const;

 private:
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_;  // LIFO: recently freed blocks are reused first (warm in L2)
};

struct CacheUsage {
  int64_t blocks_used = 0, blocks_total = 0, slots_used = 0, slots_total = 0, sequences = 0;
};

// Tokens [first_token, first_token + count) of a sequence whose KV rows are the pool's rows
// [first_row, first_row + count): its tokens over its blocks, adjacent blocks merged.
struct RowRun {
  int64_t first_token = 0, first_row = 0, count = 0;
};
// The runs of a sequence's first `tokens` tokens (blocks must hold them).
std::vector<RowRun> row_runs(std::span<const int32_t> blocks, int64_t block_size, int64_t tokens);

class HybridCache {
 public:
  HybridCache(int64_t num_blocks, int64_t block_size, int64_t num_slots);

  // Reserves blocks for prompt_tokens + max_new_tokens and one state slot. False (nothing
  // taken) when either does not fit; the caller queues or rejects the request. `shared`: blocks
  // another owner holds (a saved prefix's full blocks), retained as the head of the sequence's
  // table; only the rest is taken from the free blocks.
  bool admit(int64_t sequence_id, int64_t prompt_tokens, int64_t max_new_tokens,
             std::span<const int32_t> shared = {});
  // Grows the sequence's blocks to hold `tokens` tokens (never shrinks). False (nothing taken)
  // when too few blocks are free; the caller preempts someone or waits.
  bool reserve(int64_t sequence_id, int64_t tokens);
  // Frees everything the sequence holds (finished, cancelled or preempted).
  void release(int64_t sequence_id);
  bool contains(int64_t sequence_id) const { return sequences_.count(sequence_id) != 0; }
  // Whether the sequence alone holds the blocks of its tokens [first_token, end_token): those a
  // forward of them writes (a block shared with a prefix entry or another sequence never is).
  bool exclusive(int64_t sequence_id, int64_t first_token, int64_t end_token) const;

  // Blocks outside any sequence (a prefix entry's): `count` fresh ones, or none when fewer are
  // free; another reference to each of `blocks`; one reference less (freed with the last).
  std::optional<std::vector<int32_t>> allocate_blocks(int64_t count) { return blocks_.allocate(count); }
  void retain_blocks(std::span<const int32_t> blocks);
  void release_blocks(std::span<const int32_t> blocks);
  int32_t ref_count(int32_t block) const { return blocks_.ref_count(block); }

  const std::vector<int32_t>& block_table(int64_t sequence_id) const;
  int32_t slot(int64_t sequence_id) const;
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return blocks_.size(); }
  int64_t num_slots() const { return num_slots_; }
  // Blocks needed for `tokens` tokens.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  int64_t free_blocks() const { return blocks_.free_count(); }
  int64_t free_slots() const { return int64_t(free_slots_.size()); }
  CacheUsage usage() const;

 private:
  struct Entry {
    std::vector<int32_t> blocks;
    int32_t slot;
  };
  BlockPool blocks_;
  int64_t block_size_;
  std::vector<int32_t> free_slots_;
  int64_t num_slots_;
  std::unordered_map<int64_t, Entry> sequences_;
};

}  // namespace vt
