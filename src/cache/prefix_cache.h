// Prefix caching: sequence states saved at token positions, found again by the tokens that led to
// them. A request whose prompt extends saved tokens starts from the longest such state instead of
// computing them. An entry holds the saved tokens' KV blocks by reference (HybridCache: a hit puts
// the same blocks at the head of the new sequence's table) and a snapshot of what is not in the
// blocks (Model::save_state: the recurrent and conv states). Entries are keyed by a hash chained
// over the tokens (and checked token by token), evicted least recently used beyond a byte budget,
// or when the pool runs short of blocks. The engine thread alone uses it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/hybrid_cache.h"
#include "model/model.h"

namespace vt {

class PrefixCache {
 public:
  // The budget counts what the cache alone keeps: its snapshots' bytes, plus `block_bytes` for
  // every block no sequence holds (only entries do). A block a running sequence shares costs the
  // cache nothing (the sequence needs it anyway); it starts to count when the last sequence lets go.
  PrefixCache(int64_t max_bytes, HybridCache& cache, int64_t block_bytes);
  ~PrefixCache();  // the entries' blocks go back to the pool
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Hit {
    std::shared_ptr<const StateSnapshot> snapshot;  // null: no saved prefix
    // The blocks holding the saved tokens (blocks_for(length)): those of full blocks to share, the
    // last one, when partly filled, to copy (the new sequence writes after the saved tokens).
    // They stay valid while the entry lives: retain them before anything may evict it.
    std::vector<int32_t> blocks;
    int64_t length = 0;
  };
  // The longest saved state of tokens[0, n) with n <= limit (a hit counts as a use).
  Hit find(std::span<const int32_t> tokens, int64_t limit);
  // Whether tokens (all of them) have a saved state; counts as a use.
  bool touch(std::span<const int32_t> tokens);
  // Saves the state of `tokens` (snapshot->length() == tokens.size()) with one reference to each
  // of `blocks` (the cache's blocks holding them), which the entry takes over; then trims. A
  // prefix saved already keeps its entry; the references go back.
  void insert(std::span<const int32_t> tokens, std::unique_ptr<StateSnapshot> snapshot, std::vector<int32_t> blocks);
  // Drops the least recently used entry (its snapshot and block references); false when empty.
  bool evict_one();
  // Evicts entries, least recently used first (those whose eviction frees a block before those
  // that free none), until `blocks` blocks are free in the pool. False, evicting nothing, when
  // even evicting every entry would not free enough (blocks held by sequences stay theirs).
  bool make_room(int64_t blocks);
  // Evicts entries while over the budget (after sequences let go of blocks they shared): first one
  // that alone is over the whole budget (it could not stay whatever else went), else the least
  // recently used.
  void trim();

  int64_t entries() const { return int64_t(entries_.size()); }
  int64_t snapshot_bytes() const { return snapshot_bytes_; }
  // Blocks only entries hold (the pool gets them back when those entries go).
  int64_t cached_blocks() const;
  int64_t bytes() const { return snapshot_bytes_ + cached_blocks() * block_bytes_; }
  int64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::shared_ptr<const StateSnapshot> snapshot;
    std::vector<int32_t> blocks;
    std::list<uint64_t>::iterator use;  // position in uses_ (front: most recent)
  };
  Entry* lookup(uint64_t hash, std::span<const int32_t> tokens);
  void use(Entry& entry);
  void evict(std::list<uint64_t>::iterator use);
  // Whether evicting the entry gives a block back to the pool now.
  bool frees_a_block(const Entry& entry) const;
  // What the entry would cost were it the only one: its snapshot and its blocks no sequence holds.
  int64_t alone_bytes(const Entry& entry) const;

  int64_t max_bytes_, block_bytes_, snapshot_bytes_ = 0, evictions_ = 0;
  HybridCache& cache_;
  std::unordered_map<uint64_t, Entry> entries_;  // by the hash of their tokens
  std::unordered_map<int64_t, int64_t> lengths_;  // saved lengths -> how many entries have one
  std::unordered_map<int32_t, int32_t> block_refs_;  // block -> references entries hold
  std::list<uint64_t> uses_;                         // hashes, most recently used first
};

}  // namespace vt
