// The runner's sequences (cuda_runner*.cpp): a target sequence's entry in the runner's cache (its
// slot and KV blocks), rollback window bounds and kept hidden states, and an MTP head sequence's
// slot.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/hybrid_cache.h"
#include "model/model.h"

namespace vt {

// A sequence that holds one of the runner's slots while it lives.
class SlotSequence : public SequenceState {
 public:
  SlotSequence(int64_t slot, int64_t capacity, std::vector<bool>* used) : slot_(slot), used_(used) {
    capacity_ = capacity;
  }
  ~SlotSequence() override { (*used_)[slot_] = false; }
  int64_t slot() const { return slot_; }

 private:
  int64_t slot_;
  std::vector<bool>* used_;
};

// A target sequence: the entry `entry` of the runner's HybridCache (its state slot's
// linear-attention states and its blocks' KV rows), its rollback window's bounds, and the
// positions whose hidden states it keeps (keep_hidden). It is the slot's live sequence in `live`
// while it lives; `owner` is the cache it releases its entry from when it ends (a sequence that
// admitted itself), null when the caller that admitted it releases it.
class CudaSequence final : public SequenceState {
 public:
  CudaSequence(int64_t entry, int64_t slot, int64_t capacity, HybridCache* owner,
               std::vector<const CudaSequence*>* live)
      : entry_(entry), slot_(slot), owner_(owner), live_(live) {
    capacity_ = capacity;
    (*live_)[size_t(slot_)] = this;
  }
  ~CudaSequence() override {
    if ((*live_)[size_t(slot_)] == this) (*live_)[size_t(slot_)] = nullptr;
    if (owner_) owner_->release(entry_);
  }
  CudaSequence(const CudaSequence&) = delete;
  CudaSequence& operator=(const CudaSequence&) = delete;
  int64_t entry() const { return entry_; }
  int64_t slot() const { return slot_; }
  // As the CPU reference's state: outside a window the floor follows the length.
  void advance(int64_t tokens) {
    length_ += tokens;
    if (!window_open_) rollback_floor_ = length_;
  }
  bool window_open() const { return window_open_; }
  void open_window() {
    window_open_ = true;
    rollback_floor_ = length_;
  }
  void close_window() {
    window_open_ = false;
    rollback_floor_ = length_;
  }
  void set_length(int64_t length) { length_ = length; }
  // Kept hidden states: positions [kept_start, kept_start + kept_count), those below the length
  // valid (a rollback leaves the rest until the next forward replaces them); position p lies in
  // row p % rows of the slot's ring.
  int64_t kept_start = 0, kept_count = 0;

 private:
  int64_t entry_, slot_;
  HybridCache* owner_;
  std::vector<const CudaSequence*>* live_;
  bool window_open_ = false;
};

// One MTP head sequence: the KV entries [0, length) of its slot's blocks in the head's cache.
class CudaMtpSequence final : public SlotSequence {
 public:
  using SlotSequence::SlotSequence;
  // A KV cache only shortens: the floor follows the length.
  void set_length(int64_t length) { length_ = rollback_floor_ = length; }
  bool has_output = false;  // the slot's output row is the output of the pair at length - 1
};

}  // namespace vt
