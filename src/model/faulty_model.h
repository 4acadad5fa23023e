// A Model that runs another and fails its batched forwards from the Nth on, as a device error
// would (a CUDA error is sticky: every later call fails too), or one sequence it is asked to make
// (a request the model cannot start: no memory for it). It exercises the serving engine's failure
// paths on the CPU: `vt serve --inject-fault-at-forward N` and the engine's tests.
#pragma once

#include <atomic>
#include <cstdint>

#include "model/model.h"

namespace vt {

class FaultyModel : public Model {
 public:
  // `fail_from`: the first batched forward (1-based: forward_batch or forward_batch_sample) that
  // throws; 0 never. `fail_sequence`: the one new sequence (1-based) that throws; 0 none.
  FaultyModel(Model& inner, int64_t fail_from, int64_t fail_sequence = 0)
      : inner_(inner), fail_from_(fail_from), fail_sequence_(fail_sequence) {}

  const ModelInfo& info() const override { return inner_.info(); }
  // Both ways of making a sequence count: the engine uses the second when the model has a cache.
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const override {
    count_sequence();
    return inner_.new_sequence(capacity);
  }
  HybridCache* kv_cache() override { return inner_.kv_cache(); }
  std::unique_ptr<SequenceState> new_sequence_in_cache(int64_t cache_id, int64_t capacity) const override {
    count_sequence();
    return inner_.new_sequence_in_cache(cache_id, capacity);
  }
  void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
               const ForwardOptions& options) override {
    inner_.forward(tokens, state, logits, options);
  }
  void forward_batch(std::span<const BatchItem> items, const TensorView& logits) override {
    count_forward();
    inner_.forward_batch(items, logits);
  }
  bool supports_device_sampling() const override { return inner_.supports_device_sampling(); }
  void forward_batch_sample(std::span<const BatchItem> items, std::span<const RowOutput> rows,
                            std::span<int32_t> tokens, const TensorView& logits) override {
    count_forward();
    inner_.forward_batch_sample(items, rows, tokens, logits);
  }
  std::string describe() const override { return inner_.describe(); }
  bool supports_rollback() const override { return inner_.supports_rollback(); }
  void rollback(SequenceState& state, int64_t length) override { inner_.rollback(state, length); }
  void commit(SequenceState& state) override { inner_.commit(state); }
  bool supports_prefix_cache() const override { return inner_.supports_prefix_cache(); }
  std::unique_ptr<StateSnapshot> save_state(const SequenceState& state) override {
    return inner_.save_state(state);
  }
  void restore_state(const StateSnapshot& snapshot, SequenceState& state) override {
    inner_.restore_state(snapshot, state);
  }
  void copy_kv_block(int32_t from, int32_t to) override { inner_.copy_kv_block(from, to); }
  int64_t kv_block_bytes() const override { return inner_.kv_block_bytes(); }

  int64_t forwards() const { return forwards_; }  // batched forwards asked for so far

 private:
  void count_sequence() const {
    const int64_t call = ++sequences_;
    if (call == fail_sequence_) VT_FAIL("injected fault: new sequence ", call, " failed (no memory for it)");
  }
  void count_forward() {
    const int64_t call = ++forwards_;
    if (fail_from_ > 0 && call >= fail_from_)
      VT_FAIL("injected fault: batched forward ", call, " failed (a stand-in for a device error; failing from forward ",
              fail_from_, " on)");
  }

  Model& inner_;
  const int64_t fail_from_, fail_sequence_;
  std::atomic<int64_t> forwards_{0};
  mutable std::atomic<int64_t> sequences_{0};
};

}  // namespace vt
