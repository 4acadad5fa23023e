// Prefix caching: sequence states saved at token positions (Model::save_state), found again by
// the tokens that led to them. A request whose prompt extends saved tokens starts from the
// longest such state instead of computing them. Entries are keyed by a hash chained over the
// tokens (and checked token by token), evicted least recently used beyond a byte budget.
// The engine thread alone uses it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/model.h"

namespace vt {

class PrefixCache {
 public:
  explicit PrefixCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

  struct Hit {
    std::shared_ptr<const StateSnapshot> snapshot;  // null: no saved prefix
    int64_t length = 0;
  };
  // The longest saved state of tokens[0, n) with n <= limit (a hit counts as a use).
  Hit find(std::span<const int32_t> tokens, int64_t limit);
  // Whether tokens (all of them) have a saved state; counts as a use.
  bool touch(std::span<const int32_t> tokens);
  // Saves the state of `tokens` (snapshot->length() == tokens.size()), then evicts the least
  // recently used entries while over the budget (the new one last, so one larger than the whole
  // budget is not kept).
  void insert(std::span<const int32_t> tokens, std::unique_ptr<StateSnapshot> snapshot);
  // Drops the least recently used entry; false when empty.
  bool evict_one();

  int64_t entries() const { return int64_t(entries_.size()); }
  int64_t bytes() const { return bytes_; }
  int64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::shared_ptr<const StateSnapshot> snapshot;
    std::list<uint64_t>::iterator use;  // position in uses_ (front: most recent)
  };
  Entry* lookup(uint64_t hash, std::span<const int32_t> tokens);
  void use(Entry& entry);

  int64_t max_bytes_, bytes_ = 0, evictions_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;  // by the hash of their tokens
  std::unordered_map<int64_t, int64_t> lengths_;  // saved lengths -> how many entries have one
  std::list<uint64_t> uses_;                      // hashes, most recently used first
};

}  // namespace vt
