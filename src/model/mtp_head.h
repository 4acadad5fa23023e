// The multi-token-prediction head of a target model (the checkpoint's `mtp.*`), as the MTP drafter
// (speculative/mtp_drafter.h) drives it, whichever backend runs it. Hidden states stay where the model
// computes them (host memory on the CPU reference, device memory on CUDA): the drafter names
// positions, never tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/error.h"
#include "core/tensor.h"
#include "model/model.h"

namespace vt {

// Positions [start, start + count) of a sequence.
struct PositionRange {
  int64_t start = 0, count = 0;
  int64_t end() const { return start + count; }
  bool contains(int64_t first, int64_t size) const {
    return first >= start && first + size <= end();
  }
};

// The target keeps the lm_head inputs (after the final norm) of the positions its last forward
// ran. The head's sequence is the KV cache of its attention layer: entry p holds the pair (hidden
// at p, token at p + 1), rotated at position p as vLLM does; its output at p is its own lm_head
// input, predicting the token at p + 2, and chains the next draft.
class MtpHead {
 public:
  virtual ~MtpHead() = default;
  // The target's; a class that is also a Model implements both with one function.
  virtual const ModelInfo& info() const = 0;
  virtual bool has_mtp() const = 0;  // loaded with its MTP head
  // Keep the hidden states of every position each target forward runs (off by default).
  virtual void set_keep_hidden_states(bool keep) = 0;
  // The positions whose hidden states the target's last forward kept (count 0: none).
  virtual PositionRange kept_hidden_positions() const = 0;
  // The head's KV cache for one sequence of up to `capacity` pairs.
  virtual std::unique_ptr<SequenceState> new_mtp_sequence(int64_t capacity) const = 0;
  // Drops the pairs after the first `length` (a KV cache only shortens).
  virtual void mtp_rollback(SequenceState& state, int64_t length) const = 0;
  // Runs T pairs after what `state` holds: the target's kept hidden states of positions
  // [first_position, first_position + T) with `tokens` [T], the token at the position after each.
  // logits [1, vocab] host f32: the last pair's prediction. `state` keeps that pair's output.
  virtual void mtp_forward_from_target(std::span<const int32_t> tokens, int64_t first_position,
                                       SequenceState& state, const TensorView& logits) = 0;
  // Runs one pair: the output of the last pair `state` ran (nothing rolled back since) with
  // `token`, the draft that output predicted. Same logits and kept output.
  virtual void mtp_forward_chained(int32_t token, SequenceState& state,
                                   const TensorView& logits) = 0;

  // Batched steps (the serving engine): a forward of a target sequence with keep_hidden
  // (ForwardOptions, BatchItem) keeps its positions' hidden states in that sequence, after the
  // ones kept before (those from its first position on are replaced: rolled-back positions go;
  // after a gap only its own stay), until mtp_forward_from_sequence has used them. Other forwards
  // leave them. A backend may bound how many one sequence holds (the CUDA model: one step's
  // tokens); a forward that would pass the bound is refused before it changes anything. False:
  // this backend does not keep them (its forwards refuse keep_hidden).
  virtual bool keeps_sequence_hidden_states() const { return false; }
  // The positions whose hidden states `target` keeps (count 0: none), below its length.
  virtual PositionRange sequence_hidden_positions(const SequenceState& target) const {
    (void)target;
    VT_FAIL("MTP: ", info().architecture, " on this backend keeps no hidden states per sequence");
  }
  // As mtp_forward_from_target, with the hidden states `target` keeps; drops those before
  // first_position + T (the next pairs start there).
  virtual void mtp_forward_from_sequence(std::span<const int32_t> tokens, int64_t first_position,
                                         SequenceState& target, SequenceState& state,
                                         const TensorView& logits) {
    (void)tokens, (void)first_position, (void)target, (void)state, (void)logits;
    VT_FAIL("MTP: ", info().architecture, " on this backend keeps no hidden states per sequence");
  }
};

}  // namespace vt
