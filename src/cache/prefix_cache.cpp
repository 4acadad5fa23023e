#include "cache/prefix_cache.h"

#include <algorithm>

namespace vt {

namespace {

// The hash of tokens[0, n + 1) from that of tokens[0, n): a chain, so every prefix's hash comes
// in one pass (splitmix64's finaliser mixes each step).
uint64_t chain(uint64_t hash, int32_t token) {
  uint64_t z = hash + 0x9E3779B97F4A7C15ull + uint64_t(uint32_t(token));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_of(std::span<const int32_t> tokens) {
  uint64_t hash = 0;
  for (int32_t token : tokens) hash = chain(hash, token);
  return hash;
}

}  // namespace

PrefixCache::Entry* PrefixCache::lookup(uint64_t hash, std::span<const int32_t> tokens) {
  auto it = entries_.find(hash);
  if (it == entries_.end() || !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin(),
                                          it->second.tokens.end()))
    return nullptr;
  return &it->second;
}

void PrefixCache::use(Entry& entry) { uses_.splice(uses_.begin(), uses_, entry.use); }

PrefixCache::Hit PrefixCache::find(std::span<const int32_t> tokens, int64_t limit) {
  limit = std::min<int64_t>(limit, int64_t(tokens.size()));
  Hit hit;
  if (entries_.empty()) return hit;
  uint64_t hash = 0;
  Entry* best = nullptr;
  for (int64_t n = 1; n <= limit; ++n) {
    hash = chain(hash, tokens[size_t(n - 1)]);
    if (!lengths_.count(n)) continue;
    if (Entry* entry = lookup(hash, tokens.first(size_t(n)))) best = entry;
  }
  if (!best) return hit;
  use(*best);
  hit.snapshot = best->snapshot;
  hit.length = best->snapshot->length();
  return hit;
}

bool PrefixCache::touch(std::span<const int32_t> tokens) {
  Entry* entry = lookup(hash_of(tokens), tokens);
  if (entry) use(*entry);
  return entry != nullptr;
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::unique_ptr<StateSnapshot> snapshot) {
  const uint64_t hash = hash_of(tokens);
  if (entries_.count(hash)) return;  // saved already (or a colliding prefix keeps its place)
  uses_.push_front(hash);
  Entry& entry = entries_[hash];
  entry.tokens.assign(tokens.begin(), tokens.end());
  bytes_ += snapshot->bytes();
  entry.snapshot = std::move(snapshot);
  entry.use = uses_.begin();
  ++lengths_[int64_t(tokens.size())];
  while (bytes_ > max_bytes_) evict_one();
}

bool PrefixCache::evict_one() {
  if (uses_.empty()) return false;
  const uint64_t hash = uses_.back();
  uses_.pop_back();
  auto it = entries_.find(hash);
  bytes_ -= it->second.snapshot->bytes();
  const int64_t length = int64_t(it->second.tokens.size());
  if (--lengths_[length] == 0) lengths_.erase(length);
  entries_.erase(it);
  ++evictions_;
  return true;
}

}  // namespace vt
