// The Model interface: a loaded checkpoint that runs forward steps over a sequence's state.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "model/linear.h"
#include "ops/sampling/params.h"

namespace vt {

class HybridCache;  // cache/hybrid_cache.h: the Model interface hands a model's cache out, never uses it

// Per-sequence state a model keeps between steps (KV cache, recurrent state, ...).
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  int64_t length() const { return length_; }      // tokens processed so far
  int64_t capacity() const { return capacity_; }  // most tokens it can hold
  // The shortest length Model::rollback can set (models that support rollback keep it).
  int64_t rollback_floor() const { return rollback_floor_; }

 protected:
  int64_t length_ = 0, capacity_ = 0, rollback_floor_ = 0;
  friend class Qwen35Model;
};

// A sequence's state saved at `length` tokens (prefix caching): enough to start another sequence
// there without computing those tokens. What it holds is the model's (KV rows and recurrent
// states); it is freed with the last holder.
class StateSnapshot {
 public:
  virtual ~StateSnapshot() = default;
  int64_t length() const { return length_; }
  int64_t bytes() const { return bytes_; }

 protected:
  int64_t length_ = 0, bytes_ = 0;
};

// Named activations at block boundaries ("attn_out", layer 3, [T, H]) for diffing against a
// reference. Free when no sink is installed.
using TapSink = std::function<void(const std::string& name, int layer, const TensorView& tensor)>;

enum class DeltaRuleChoice { kAuto, kRecurrent, kChunked };

struct ForwardOptions {
  bool all_logits = false;  // logits for every token, else only the last one
  DeltaRuleChoice delta_rule = DeltaRuleChoice::kAuto;  // auto: recurrent for 1 token
  // Speculative verification: these tokens join the sequence's rollback window (opened at its
  // current length when none is open), so Model::rollback can later set the sequence to any
  // length inside it. A forward without it closes the window first (as commit() does).
  bool keep_rollback = false;
  // The MTP drafter in a batch: keep these positions' lm_head inputs (after the final norm) in the
  // sequence, for MtpHead::mtp_forward_from_sequence (models that implement MtpHead and say
  // keeps_sequence_hidden_states()).
  bool keep_hidden = false;
};

// One sequence's part of a batched forward: its next tokens (a prompt chunk, one decode token,
// or a speculative verify: the last token and its drafts).
struct BatchItem {
  std::span<const int32_t> tokens;
  SequenceState* state = nullptr;
  bool keep_rollback = false;  // as ForwardOptions::keep_rollback, per sequence
  // A row of logits for every token (a verify step), else only for the last one. Such items run
  // the per-token (recurrent) delta rule, as decoding does.
  bool all_logits = false;
  bool keep_hidden = false;  // as ForwardOptions::keep_hidden, per sequence
};

// Rows of logits a batched forward of `items` produces: tokens.size() for an all_logits item, else 1.
inline int64_t batch_logit_rows(std::span<const BatchItem> items) {
  int64_t rows = 0;
  for (const BatchItem& item : items) rows += item.all_logits ? int64_t(item.tokens.size()) : 1;
  return rows;
}

// Called while weights load: bytes read (or dequantised) so far out of the total.
using LoadProgress = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

struct ModelInfo {
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t max_positions = 0;
  // A token's work, for the engine's step cost (engine/step_budget.h); 0: not known. The weights
  // a token multiplies through in the layers (MoE: the router and its active experts; neither the
  // embedding nor the LM head, which a prompt chunk runs for one row), and the layers that attend
  // over the whole context with their query heads and head size.
  int64_t layer_weights_per_token = 0;
  int64_t attention_layers = 0, attention_heads = 0, attention_head_dim = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // A sequence of up to `capacity` tokens. A model with a cache of its own (kv_cache()) admits it
  // there for its whole capacity and releases it with the sequence.
  virtual std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const = 0;
  // The cache of KV blocks and state slots the model's sequences live in (the CUDA runner's device
  // pool: one block size, its blocks the device's), or null when each sequence keeps its own
  // memory (the CPU models). A caller that schedules many sequences (the engine) admits each
  // there under its own id, grows it (HybridCache::reserve) before running tokens past its blocks,
  // makes its state with new_sequence_in_cache and releases the entry when the state is done.
  virtual HybridCache* kv_cache() { return nullptr; }
  // A sequence over the entry `cache_id` the caller admitted into kv_cache(); a model without a
  // cache ignores the id (the caller's own cache only admits).
  virtual std::unique_ptr<SequenceState> new_sequence_in_cache(int64_t cache_id, int64_t capacity) const {
    (void)cache_id;
    return new_sequence(capacity);
  }
  // Runs `tokens` after what `state` holds; logits [T or 1, vocab] (f32).
  virtual void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
                       const ForwardOptions& options) = 0;
  // Runs several sequences' tokens in one step; logits [batch_logit_rows(items), vocab] host f32
  // get, item after item, its last token's row (or every token's, for an all_logits item). The
  // default runs the items one by one (the CPU reference: each row's arithmetic does not depend
  // on the batch); the CUDA model runs them as one batched step.
  virtual void forward_batch(std::span<const BatchItem> items, const TensorView& logits) {
    const int64_t vocab = info().vocab_size, rows = batch_logit_rows(items);
    VT_CHECK(logits.dtype == DType::kF32 && logits.shape == Shape({rows, vocab}),
             "forward_batch: logits must be f32 [", rows, ", ", vocab, "], got ", logits.shape.str());
    int64_t row = 0;
    for (const BatchItem& item : items) {
      ForwardOptions options;
      options.keep_rollback = item.keep_rollback;
      options.all_logits = item.all_logits;
      options.keep_hidden = item.keep_hidden;
      if (item.all_logits) options.delta_rule = DeltaRuleChoice::kRecurrent;
      const int64_t item_rows = item.all_logits ? int64_t(item.tokens.size()) : 1;
      forward(item.tokens, *item.state, logits.rows(row, row + item_rows), options);
      row += item_rows;
    }
  }

  // Sampling on the model's device: forward_batch_sample runs a step as forward_batch does and
  // draws the tokens there, so only the ids (and the logit rows the host still needs) come back.
  virtual bool supports_device_sampling() const { return false; }
  // rows [batch_logit_rows(items)] says what each logit row gives: kToken: tokens[row] = a token
  // drawn on the device (SamplingParams and counter; greedy rows give forward_batch's argmax
  // exactly; sampled rows the host Sampler's distribution, drawn with ops/device_sampling.h's
  // RNG, so a seed gives the same tokens run to run on the device, not the host Sampler's);
  // kLogits: that row of `logits` (host f32 [rows, vocab], as forward_batch) is written. Other
  // rows of `logits` are left as they were; tokens[row] is -1 for rows that are not kToken.
  virtual void forward_batch_sample(std::span<const BatchItem> items, std::span<const RowOutput> rows,
                                    std::span<int32_t> tokens, const TensorView& logits) {
    (void)items, (void)rows, (void)tokens, (void)logits;
    VT_FAIL("forward_batch_sample: this backend does not sample on its device (", info().architecture, ")");
  }

  // Prepares, before serving, what the first steps would otherwise pay for under load (the CUDA
  // model captures its decode graphs).
  virtual void warm_up() {}

  // A human-readable description (layers, tensors, bytes) for `vt inspect`.
  virtual std::string describe() const = 0;

  // Rollback for speculative decoding: run the last token plus k drafts in one forward with
  // ForwardOptions::keep_rollback, then rollback() to the accepted prefix and commit(). Backends
  // that cannot do it say so here and throw from rollback/commit.
  virtual bool supports_rollback() const { return false; }
  // Sets `state` to `length` tokens, rollback_floor() <= length <= length(), as if only those
  // had been run. The window stays open (a later rollback may go back to the same floor).
  virtual void rollback(SequenceState& state, int64_t length) {
    (void)state, (void)length;
    VT_FAIL("rollback: not supported by this backend (", info().architecture, ")");
  }
  // Closes the rollback window: what it kept is dropped and the floor rises to the current
  // length (a pure-KV model may keep a lower floor: truncating its cache is always possible).
  virtual void commit(SequenceState& state) {
    (void)state;
    VT_FAIL("commit: not supported by this backend (", info().architecture, ")");
  }

  // Prefix caching: save_state copies a sequence's state at its length (outside a rollback
  // window; null when the model's device has no room for it now), restore_state sets a new,
  // empty sequence to a snapshot: it continues from snapshot.length() tokens exactly as the saved
  // sequence would have. A model whose sequences keep their KV rows in kv_cache()'s blocks saves
  // only what the blocks do not hold (the recurrent and conv states): the caller keeps references
  // to the blocks holding the saved tokens and admits the new sequence with the full ones at the
  // head of its table (shared, never written again) and a copy of the last, partly filled one
  // (copy_kv_block: the new sequence writes after the saved tokens), before restore_state. A
  // model without kv_cache() copies its KV rows into the snapshot.
  virtual bool supports_prefix_cache() const { return false; }
  // Copies the KV rows of block `from` of kv_cache()'s pool into block `to` (every attention
  // layer), ordered before the model's next step; a model without kv_cache() has nothing to copy.
  virtual void copy_kv_block(int32_t from, int32_t to) {
    (void)from, (void)to;
    VT_CHECK(!kv_cache(), "copy_kv_block: this backend keeps its KV in blocks and must copy them (",
             info().architecture, ")");
  }
  // Bytes of one block of kv_cache()'s pool (every attention layer's K and V rows): what a block
  // only the prefix cache keeps costs its budget; 0 without kv_cache() (a snapshot holds the KV).
  virtual int64_t kv_block_bytes() const { return 0; }
  virtual std::unique_ptr<StateSnapshot> save_state(const SequenceState& state) {
    (void)state;
    VT_FAIL("prefix caching: not supported by this backend (", info().architecture, ")");
  }
  virtual void restore_state(const StateSnapshot& snapshot, SequenceState& state) {
    (void)snapshot, (void)state;
    VT_FAIL("prefix caching: not supported by this backend (", info().architecture, ")");
  }

  // Replaces the output layer by its FP8 128x128 block quantisation, run W8A8 (activations in
  // 1x128 groups) as the GPU's `--lm-head fp8` does, or (the CPU reference only, to tell the
  // roundings apart) weight-only or with a scale per row and 128 columns; `vt eval drift` measures
  // what that changes.
  virtual void quantize_lm_head_fp8(const Fp8Quantization& quantization = {}) {
    (void)quantization;
    VT_FAIL("FP8 lm_head: not supported by this model (", info().architecture, ")");
  }

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

  // Checks a rollback target against the window [rollback_floor, length].
  static void check_rollback(const SequenceState& state, int64_t length) {
    VT_CHECK(length >= state.rollback_floor() && length <= state.length(), "rollback: length ", length,
             " is outside the rollback window [", state.rollback_floor(), ", ", state.length(), "]");
  }

  void tap(const char* name, int layer, const TensorView& tensor) const {
    if (tap_) tap_(name, layer, tensor);
  }
  const TapSink& tap_sink() const { return tap_; }

 private:
  TapSink tap_;
};

}  // namespace vt
