// The runner's sequences (cuda_runner*.cpp): a target sequence's slot, rollback window bounds and
// kept hidden states, and an MTP head sequence's slot.
#pragma once

#include <cstdint>
#include <vector>

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

// A target sequence: its slot's KV blocks and linear-attention states, its rollback window's
// bounds, and the positions whose hidden states it keeps (keep_hidden).
class CudaSequence final : public SlotSequence {
 public:
  using SlotSequence::SlotSequence;
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
