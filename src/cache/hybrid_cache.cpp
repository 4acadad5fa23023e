#include "cache/hybrid_cache.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace vt {

BlockPool::BlockPool(int64_t num_blocks) {
  VT_CHECK(num_blocks >= 0 && num_blocks <= INT32_MAX, "block pool size ", num_blocks);
  ref_counts_.assign(size_t(num_blocks), 0);
  free_.resize(size_t(num_blocks));
  // Highest index at the back so block 0 is handed out first.
  std::iota(free_.rbegin(), free_.rend(), 0);
}

std::optional<std::vector<int32_t>> BlockPool::allocate(int64_t count) {
  VT_CHECK(count >= 0, "allocate ", count, " blocks");
  if (count > free_count()) return std::nullopt;
  std::vector<int32_t> blocks(free_.rbegin(), free_.rbegin() + count);  // the back first
  free_.resize(free_.size() - size_t(count));
  for (int32_t block : blocks) ref_counts_[block] = 1;
  return blocks;
}

void BlockPool::retain(int32_t block) {
  VT_CHECK(block >= 0 && block < size() && ref_counts_[block] > 0, "retain of free or invalid block ", block);
  ++ref_counts_[block];
}

void BlockPool::release(int32_t block) {
  VT_CHECK(block >= 0 && block < size() && ref_counts_[block] > 0, "release of free or invalid block ", block);
  if (--ref_counts_[block] == 0) free_.push_back(block);
}

int32_t BlockPool::ref_count(int32_t block) const {
  VT_CHECK(block >= 0 && block < size(), "block ", block, " outside the pool of ", size());
  return ref_counts_[block];
}

HybridCache::HybridCache(int64_t num_blocks, int64_t block_size, int64_t num_slots)
    : blocks_(num_blocks), block_size_(block_size), num_slots_(num_slots) {
  VT_CHECK(block_size > 0 && num_slots >= 0 && num_slots <= INT32_MAX, "hybrid cache: block size ", block_size,
           ", slots ", num_slots);
  free_slots_.resize(size_t(num_slots));
  std::iota(free_slots_.rbegin(), free_slots_.rend(), 0);
}

bool HybridCache::admit(int64_t sequence_id, int64_t prompt_tokens, int64_t max_new_tokens,
                        std::span<const int32_t> shared) {
  VT_CHECK(!contains(sequence_id), "sequence ", sequence_id, " is already in the cache");
  VT_CHECK(prompt_tokens > 0 && max_new_tokens >= 0, "admit: prompt ", prompt_tokens, ", max_new_tokens ",
           max_new_tokens);
  const int64_t needed = blocks_for(prompt_tokens + max_new_tokens);
  VT_CHECK(int64_t(shared.size()) <= needed, "admit: ", shared.size(), " shared blocks for ", needed);
  if (free_slots_.empty()) return false;
  auto fresh = blocks_.allocate(needed - int64_t(shared.size()));
  if (!fresh) return false;
  retain_blocks(shared);
  std::vector<int32_t> blocks(shared.begin(), shared.end());
  blocks.insert(blocks.end(), fresh->begin(), fresh->end());
  const int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  sequences_.emplace(sequence_id, Entry{std::move(blocks), slot});
  return true;
}

bool HybridCache::exclusive(int64_t sequence_id, int64_t first_token, int64_t end_token) const {
  const std::vector<int32_t>& blocks = block_table(sequence_id);
  VT_CHECK(first_token >= 0 && first_token <= end_token && end_token <= int64_t(blocks.size()) * block_size_,
           "exclusive: tokens [", first_token, ", ", end_token, ") over ", blocks.size(), " blocks");
  for (int64_t block = first_token / block_size_; block < blocks_for(end_token); ++block)
    if (blocks_.ref_count(blocks[size_t(block)]) != 1) return false;
  return true;
}

void HybridCache::retain_blocks(std::span<const int32_t> blocks) {
  for (int32_t block : blocks) blocks_.retain(block);
}

void HybridCache::release_blocks(std::span<const int32_t> blocks) {
  for (int32_t block : blocks) blocks_.release(block);
}

bool HybridCache::reserve(int64_t sequence_id, int64_t tokens) {
  auto it = sequences_.find(sequence_id);
  VT_CHECK(it != sequences_.end(), "reserve for unknown sequence ", sequence_id);
  std::vector<int32_t>& held = it->second.blocks;
  const int64_t missing = blocks_for(tokens) - int64_t(held.size());
  if (missing <= 0) return true;
  auto blocks = blocks_.allocate(missing);
  if (!blocks) return false;
  held.insert(held.end(), blocks->begin(), blocks->end());
  return true;
}

void HybridCache::release(int64_t sequence_id) {
  auto it = sequences_.find(sequence_id);
  VT_CHECK(it != sequences_.end(), "release of unknown sequence ", sequence_id);
  for (int32_t block : it->second.blocks) blocks_.release(block);
  free_slots_.push_back(it->second.slot);
  sequences_.erase(it);
}

const std::vector<int32_t>& HybridCache::block_table(int64_t sequence_id) const {
  auto it = sequences_.find(sequence_id);
  VT_CHECK(it != sequences_.end(), "unknown sequence ", sequence_id);
  return it->second.blocks;
}

int32_t HybridCache::slot(int64_t sequence_id) const {
  auto it = sequences_.find(sequence_id);
  VT_CHECK(it != sequences_.end(), "unknown sequence ", sequence_id);
  return it->second.slot;
}

std::vector<RowRun> row_runs(std::span<const int32_t> blocks, int64_t block_size, int64_t tokens) {
  VT_CHECK(block_size > 0 && tokens >= 0 && tokens <= int64_t(blocks.size()) * block_size, "row runs: ", tokens,
           " tokens over ", blocks.size(), " blocks of ", block_size);
  std::vector<RowRun> runs;
  for (int64_t token = 0; token < tokens; token += block_size) {
    const int64_t row = int64_t(blocks[size_t(token / block_size)]) * block_size;
    const int64_t count = std::min(block_size, tokens - token);
    if (!runs.empty() && runs.back().first_row + runs.back().count == row) {
      runs.back().count += count;
    } else {
      runs.push_back({token, row, count});
    }
  }
  return runs;
}

CacheUsage HybridCache::usage() const {
  CacheUsage usage;
  usage.blocks_total = blocks_.size();
  usage.blocks_used = blocks_.size() - blocks_.free_count();
  usage.slots_total = num_slots_;
  usage.slots_used = num_slots_ - int64_t(free_slots_.size());
  usage.sequences = int64_t(sequences_.size());
  return usage;
}

}  // namespace vt
