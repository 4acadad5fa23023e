// The Model interface: a loaded checkpoint that runs forward steps over a sequence's state.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace vt {

// Per-sequence state a model keeps between steps (KV cache, recurrent state, ...).
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  int64_t length() const { return length_; }      // tokens processed so far
  int64_t capacity() const { return capacity_; }  // most tokens it can hold

 protected:
  int64_t length_ = 0, capacity_ = 0;
  friend class Qwen35Model;
};

// Named activations at block boundaries ("attn_out", layer 3, [T, H]) for diffing against a
// reference. Free when no sink is installed.
using TapSink = std::function<void(const std::string& name, int layer, const TensorView& tensor)>;

enum class DeltaRuleChoice { kAuto, kRecurrent, kChunked };

struct ForwardOptions {
  bool all_logits = false;  // logits for every token, else only the last one
  DeltaRuleChoice delta_rule = DeltaRuleChoice::kAuto;  // auto: recurrent for 1 token
};

// Called while weights load: bytes read (or dequantised) so far out of the total.
using LoadProgress = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

struct ModelInfo {
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t max_positions = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  virtual std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const = 0;
  // Runs `tokens` after what `state` holds; logits [T or 1, vocab] (f32).
  virtual void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
                       const ForwardOptions& options) = 0;
  // A human-readable description (layers, tensors, bytes) for `vt inspect`.
  virtual std::string describe() const = 0;

  void set_tap(TapSink sink) { tap_ = std::move(sink); }

 protected:
  // Checks a CPU forward's arguments (tokens fit the sequence, logits are host f32 of the right
  // shape) and returns how many rows of logits it produces.
  static int64_t check_forward(const SequenceState& state, int64_t num_tokens, const TensorView& logits,
                               int64_t vocab_size, bool all_logits) {
    VT_CHECK(num_tokens > 0, "forward: no tokens");
    VT_CHECK(state.length() + num_tokens <= state.capacity(), "forward: ", state.length(), " + ", num_tokens,
             " tokens exceed the sequence capacity ", state.capacity());
    const int64_t logit_rows = all_logits ? num_tokens : 1;
    VT_CHECK(logits.dtype == DType::kF32 && logits.shape == Shape({logit_rows, vocab_size}), "forward: logits must be f32 [",
             logit_rows, ", ", vocab_size, "], got ", logits.shape.str());
    return logit_rows;
  }

  void tap(const char* name, int layer, const TensorView& tensor) const {
    if (tap_) tap_(name, layer, tensor);
  }

 private:
  TapSink tap_;
};

}  // namespace vt
