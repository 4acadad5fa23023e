#include "cache/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

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

PrefixCache::PrefixCache(int64_t max_bytes, HybridCache& cache, int64_t block_bytes)
    : max_bytes_(max_bytes), block_bytes_(block_bytes), cache_(cache) {
  VT_CHECK(block_bytes >= 0, "prefix cache: ", block_bytes, " bytes per block");
}

PrefixCache::~PrefixCache() {
  for (auto& [hash, entry] : entries_) cache_.release_blocks(entry.blocks);
}

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
  hit.blocks = best->blocks;
  hit.length = best->snapshot->length();
  return hit;
}

bool PrefixCache::touch(std::span<const int32_t> tokens) {
  Entry* entry = lookup(hash_of(tokens), tokens);
  if (entry) use(*entry);
  return entry != nullptr;
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::unique_ptr<StateSnapshot> snapshot,
                         std::vector<int32_t> blocks) {
  const bool valid = snapshot && snapshot->length() == int64_t(tokens.size()) &&
                     int64_t(blocks.size()) == cache_.blocks_for(int64_t(tokens.size()));
  const uint64_t hash = hash_of(tokens);
  if (!valid || entries_.count(hash)) {  // saved already (or a colliding prefix keeps its place)
    cache_.release_blocks(blocks);
    VT_CHECK(valid, "prefix cache: a state of ", tokens.size(), " tokens over ", blocks.size(), " blocks");
    return;
  }
  uses_.push_front(hash);
  Entry& entry = entries_[hash];
  entry.tokens.assign(tokens.begin(), tokens.end());
  snapshot_bytes_ += snapshot->bytes();
  entry.snapshot = std::move(snapshot);
  for (int32_t block : blocks) ++block_refs_[block];
  entry.blocks = std::move(blocks);
  entry.use = uses_.begin();
  ++lengths_[int64_t(tokens.size())];
  trim();
}

void PrefixCache::evict(std::list<uint64_t>::iterator use) {
  const uint64_t hash = *use;
  uses_.erase(use);
  auto it = entries_.find(hash);
  Entry& entry = it->second;
  snapshot_bytes_ -= entry.snapshot->bytes();
  for (int32_t block : entry.blocks)
    if (--block_refs_[block] == 0) block_refs_.erase(block);
  cache_.release_blocks(entry.blocks);
  const int64_t length = int64_t(entry.tokens.size());
  if (--lengths_[length] == 0) lengths_.erase(length);
  entries_.erase(it);
  ++evictions_;
}

bool PrefixCache::evict_one() {
  if (uses_.empty()) return false;
  evict(std::prev(uses_.end()));
  return true;
}

void PrefixCache::trim() {
  while (!uses_.empty() && bytes() > max_bytes_) {
    // An entry that alone is over the budget (its snapshot and the blocks no sequence holds) goes
    // first: evicting the others would not keep it, so least recently used order would empty the
    // cache for nothing.
    auto victim = std::prev(uses_.end());
    for (auto it = uses_.begin(); it != uses_.end(); ++it)
      if (alone_bytes(entries_.at(*it)) > max_bytes_) {
        victim = it;
        break;
      }
    evict(victim);
  }
}

int64_t PrefixCache::alone_bytes(const Entry& entry) const {
  int64_t blocks = 0;
  for (int32_t block : entry.blocks) blocks += cache_.ref_count(block) == block_refs_.at(block);
  return entry.snapshot->bytes() + blocks * block_bytes_;
}

int64_t PrefixCache::cached_blocks() const {
  int64_t count = 0;
  for (const auto& [block, refs] : block_refs_) count += cache_.ref_count(block) == refs;
  return count;
}

bool PrefixCache::frees_a_block(const Entry& entry) const {
  for (int32_t block : entry.blocks)
    if (cache_.ref_count(block) == 1) return true;
  return false;
}

bool PrefixCache::make_room(int64_t blocks) {
  if (cache_.free_blocks() >= blocks) return true;
  if (cache_.free_blocks() + cached_blocks() < blocks) return false;
  while (cache_.free_blocks() < blocks && !uses_.empty()) {
    // An entry that frees nothing now may free blocks for the next (a shorter prefix it shares).
    auto victim = std::prev(uses_.end());
    for (auto it = uses_.end(); it != uses_.begin();) {
      --it;
      if (frees_a_block(entries_.at(*it))) {
        victim = it;
        break;
      }
    }
    evict(victim);
  }
  return cache_.free_blocks() >= blocks;
}

}  // namespace vt
