// Open-addressing tables for the BPE hot path: byte strings to ids (vocabulary, word cache) and
// id pairs to merges. std::unordered_map costs an allocation per entry and a pointer chase per
// probe; these keep everything in flat arrays.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace vt {

inline uint64_t hash_bytes(std::string_view bytes) {
  uint64_t hash = 0x9E3779B97F4A7C15ull ^ bytes.size();
  const char* data = bytes.data();
  size_t size = bytes.size();
  while (size >= 8) {
    uint64_t chunk;
    std::memcpy(&chunk, data, 8);
    hash = (hash ^ chunk) * 0xBF58476D1CE4E5B9ull;
    hash ^= hash >> 29;
    data += 8;
    size -= 8;
  }
  if (size > 0) {
    uint64_t chunk = 0;
    std::memcpy(&chunk, data, size);
    hash = (hash ^ chunk) * 0xBF58476D1CE4E5B9ull;
  }
  hash ^= hash >> 32;
  hash *= 0x94D049BB133111EBull;
  hash ^= hash >> 29;
  return hash;
}

// Byte string -> int32 value; keys are copied into one arena.
class StringTable {
 public:
  int32_t find(std::string_view key) const { return find(key, hash_bytes(key)); }
  int32_t find(std::string_view key, uint64_t hash) const {
    if (slots_.empty()) return -1;
    for (size_t index = hash & mask_;; index = (index + 1) & mask_) {
      const Slot& slot = slots_[index];
      if (slot.value < 0) return -1;
      if (slot.hash == hash && slot.length == key.size() &&
          std::memcmp(arena_.data() + slot.offset, key.data(), key.size()) == 0)
        return slot.value;
    }
  }
  // Inserts or overwrites.
  void insert(std::string_view key, int32_t value) { insert(key, hash_bytes(key), value); }
  void insert(std::string_view key, uint64_t hash, int32_t value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    for (size_t index = hash & mask_;; index = (index + 1) & mask_) {
      Slot& slot = slots_[index];
      if (slot.value < 0) {
        slot = {hash, uint32_t(arena_.size()), uint32_t(key.size()), value};
        arena_.append(key);
        ++size_;
        return;
      }
      if (slot.hash == hash && slot.length == key.size() &&
          std::memcmp(arena_.data() + slot.offset, key.data(), key.size()) == 0) {
        slot.value = value;
        return;
      }
    }
  }
  size_t size() const { return size_; }
  size_t arena_bytes() const { return arena_.size(); }
  void clear() {
    slots_.clear();
    arena_.clear();
    size_ = 0;
    mask_ = 0;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, length = 0;
    int32_t value = -1;  // -1: empty
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (slot.value < 0) continue;
      size_t index = slot.hash & mask_;
      while (slots_[index].value >= 0) index = (index + 1) & mask_;
      slots_[index] = slot;
    }
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t size_ = 0, mask_ = 0;
};

// (left id, right id) -> (merge rank, merged id).
class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };
  void reserve(size_t count) {
    size_t capacity = 64;
    while (capacity < count * 2) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64 - __builtin_ctzll(capacity);
  }
  // Later entries overwrite earlier ones for the same pair, as HF's merge map does.
  void insert(int32_t left, int32_t right, Merge merge) {
    const uint64_t key = pack(left, right);
    for (size_t index = slot_of(key);; index = (index + 1) & mask_) {
      Slot& slot = slots_[index];
      if (slot.key == kEmpty || slot.key == key) {
        slot.key = key;
        slot.merge = merge;
        return;
      }
    }
  }
  const Merge* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t index = slot_of(key);; index = (index + 1) & mask_) {
      const Slot& slot = slots_[index];
      if (slot.key == key) return &slot.merge;
      if (slot.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;  // ids are non-negative int32, so no pair packs to this
  static uint64_t pack(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  size_t slot_of(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace vt
