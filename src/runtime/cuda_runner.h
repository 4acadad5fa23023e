// The runner any CUDA model (model/cuda_forward.h) is served through: it turns the Model and
// MtpHead interfaces' calls into steps of the model. It owns the step's layout (uploaded from
// pinned staging), the cache's memory (cache/device_cache.h) and the one HybridCache that hands
// out its KV blocks and sequence slots (Model::kv_cache(): the engine admits there), the CUDA
// graphs of decode steps, the logits' way to the host, sampling on the device, the hidden states
// the MTP drafters read, and the benchmarks' decode steps.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cache/device_cache.h"
#include "cache/hybrid_cache.h"
#include "cuda/device_buffer.h"
#include "model/cuda_forward.h"
#include "model/model.h"
#include "model/mtp_head.h"
#include "ops/gdn/gdn.h"

typedef struct CUevent_st* cudaEvent_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;

namespace vt {

struct SampleRowParams;
class CudaSequence;

class CudaRunner : public Model, public MtpHead {
 public:
  CudaRunner(std::unique_ptr<CudaForward> model, const CudaModelOptions& options);
  ~CudaRunner() override;

  // Model interface (logits copied to the host as f32).
  const ModelInfo& info() const override { return model_->info(); }
  // The device cache's pool of KV blocks (CudaModelOptions::cache_blocks) and its sequence slots:
  // a sequence's blocks are those of its entry, its block-table row rewritten (the entries that
  // changed) with the step that first reads them.
  HybridCache* kv_cache() override { return &kv_cache_; }
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const override;
  std::unique_ptr<SequenceState> new_sequence_in_cache(int64_t cache_id, int64_t capacity) const override;
  void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
               const ForwardOptions& options) override;
  std::string describe() const override { return model_->describe(); }
  // One batched step over every item (prefill chunks, decode tokens and verify steps mixed); an
  // all-decode batch replays the CUDA graph captured for its size.
  void forward_batch(std::span<const BatchItem> items, const TensorView& logits) override;
  // The same step, then one launch of cuda::sample_rows over the sampled kToken rows (greedy ones
  // take the step's argmax): only their ids and the kLogits rows come back.
  bool supports_device_sampling() const override { return true; }
  void forward_batch_sample(std::span<const BatchItem> items, std::span<const RowOutput> rows,
                            std::span<int32_t> tokens, const TensorView& logits) override;
  void quantize_lm_head_fp8(const Fp8Quantization& quantization = {}) override;
  // Rollback from per-token state copies: a keep_rollback step also saves each linear-attention
  // layer's state after every token into the sequence's window (entry 0: the state where it
  // opened); rollback copies an entry back. KV rows past the length are rewritten later.
  bool supports_rollback() const override { return options_.max_rollback_tokens > 0; }
  void rollback(SequenceState& state, int64_t length) override;
  void commit(SequenceState& state) override;
  // Prefix caching: a snapshot is a stream-ordered device allocation holding the sequence's
  // linear-attention states (DeviceCache::copy_snapshot), saved and restored by copy launches
  // queued on the runner's stream; its KV rows stay in the pool's blocks, which the caller shares
  // (restore_state checks the new sequence's blocks hold the snapshot's tokens). copy_kv_block is
  // one launch on the same stream. The MTP head's KV rows are its own, outside the pool (an MTP
  // drafter's requests neither save nor restore prefixes).
  bool supports_prefix_cache() const override { return true; }
  std::unique_ptr<StateSnapshot> save_state(const SequenceState& state) override;
  void restore_state(const StateSnapshot& snapshot, SequenceState& state) override;
  void copy_kv_block(int32_t from, int32_t to) override;
  int64_t kv_block_bytes() const override { return cache_.block_bytes(); }
  // Captures the CUDA graphs of every decode batch size forward_batch replays (all-decode steps
  // of `count` sequences run the graph of decode_graph_batch(count) >= count).
  void warm_up() override;
  int64_t decode_graph_batch(int64_t count) const;
  // Greedy verification without host logits: the items run as one batched step (never a CUDA
  // graph) and `next_tokens` gets the device argmax after every token, item after item.
  void verify_greedy(std::span<const BatchItem> items, std::vector<int32_t>* next_tokens);

  // Batched decode for benchmarks: one token for each of the first `batch` live sequences by slot
  // (the runner admits bench sequences of max_context tokens, states as they are, kept while it
  // lives, where fewer live) at context length `positions[i]`; their lengths do not change.
  // Greedy next ids on the device. A CUDA graph per batch size when `use_graph`.
  void decode_step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                   std::vector<int32_t>* next_tokens, bool use_graph);
  // The logits [rows, vocab] of the last step, as f32 on the host (tests).
  std::vector<float> last_logits(int64_t rows);
  // Random KV rows and states (benchmarks at a context length).
  void randomize_state(uint64_t seed);
  double decode_bytes(int64_t batch, int64_t context) const { return model_->decode_bytes(batch, context); }
  cudaStream_t stream() const { return stream_; }
  CudaForward& model() { return *model_; }
  const CudaForward& model() const { return *model_; }
  // Tensor parallelism: this runner drives one rank; `all_reduce` sums the row-parallel outputs.
  void set_all_reduce(DeviceAllReduce all_reduce);
  // Off for every rank but one: steps leave the logits on the device.
  void set_emit_logits(bool emit) { emit_logits_ = emit; }

  // The MTP head (model/mtp_head.h; cuda_runner_mtp.cpp). Hidden states stay on the device: a
  // forward() with keeping on copies every position's final-norm output aside, and a forward or
  // forward_batch item with keep_hidden copies its rows into its sequence's ring (at most
  // min(max_step_tokens, positions) unread rows per sequence). The head's sequences are KV rows of
  // its attention layer in their own max_sequences slots.
  bool has_mtp() const override { return model_->has_mtp(); }
  void set_keep_hidden_states(bool keep) override;
  PositionRange kept_hidden_positions() const override { return kept_positions_; }
  std::unique_ptr<SequenceState> new_mtp_sequence(int64_t capacity) const override;
  void mtp_rollback(SequenceState& state, int64_t length) const override;
  void mtp_forward_from_target(std::span<const int32_t> tokens, int64_t first_position, SequenceState& state,
                               const TensorView& logits) override;
  void mtp_forward_chained(int32_t token, SequenceState& state, const TensorView& logits) override;
  bool keeps_sequence_hidden_states() const override { return true; }
  PositionRange sequence_hidden_positions(const SequenceState& target) const override;
  void mtp_forward_from_sequence(std::span<const int32_t> tokens, int64_t first_position, SequenceState& target,
                                 SequenceState& state, const TensorView& logits) override;
  // What forward() kept, [kept_hidden_positions().count, H], what a target sequence keeps, and the
  // output a head sequence's last pair left for chaining, [H], as f32 on the host (tests).
  std::vector<float> kept_hidden_states();
  std::vector<float> sequence_hidden_states(const SequenceState& target);
  std::vector<float> mtp_last_output(const SequenceState& state);

 private:
  // The step's layout as it goes to the device: host vectors, then one copy from pinned staging.
  struct Layout {
    std::vector<int32_t> tokens, token_seq, positions, seq_start, slots, last_index, window_entry;
    std::vector<std::span<const int32_t>> blocks;  // each sequence's KV blocks: its block-table row
    void clear();
    void add_sequence(std::span<const int32_t> ids, int64_t slot, int64_t length, bool all_rows, int32_t entry,
                      std::span<const int32_t> sequence_blocks);
  };
  // A sequence over the cache entry `entry` (its slot zeroed when `reset`); `owned`: it releases
  // the entry when it ends.
  std::unique_ptr<SequenceState> make_sequence(int64_t entry, int64_t capacity, bool owned, bool reset) const;
  // The blocks of `state`'s entry (its block-table row), checked to hold `tokens` tokens and, when
  // a step writes its positions from its length on, to be its own alone there.
  std::span<const int32_t> blocks_holding(const CudaSequence& state, int64_t tokens,
                                          bool writes_from_length = false) const;
  const std::vector<const CudaSequence*>& bench_sequences(int64_t batch);
  void upload(const Layout& layout);
  CudaStep step(int64_t num_tokens, int64_t num_seqs, int64_t logit_rows) const;
  void run_step(int64_t num_tokens, int64_t num_seqs, int64_t logit_rows);
  void launch_decode_graph(int64_t batch, const std::function<void()>& upload);  // captured on first use
  int64_t run_batch(std::span<const BatchItem> items, bool all_rows);
  void check_window(const SequenceState& state, int64_t tokens, bool keep_rollback) const;
  void prepare_window(SequenceState& state, bool keep_rollback);
  // Copies the logit rows [first, first + count) of each range into the same rows of destination
  // (host f32 [rows, vocab]), queued after the stream's work, and waits for the stream.
  void copy_logit_rows_to_host(float* destination, std::span<const std::pair<int64_t, int64_t>> ranges);
  void copy_logits_to_host(float* destination, int64_t rows);
  std::vector<float> download(const void* data, int64_t count);
  size_t row_bytes() const;
  // Hidden states kept per target sequence (cuda_runner_mtp.cpp).
  void check_sequence_hidden(const SequenceState& state, int64_t tokens);
  void keep_sequence_hidden(SequenceState& state, int64_t hidden_row, int64_t count, std::vector<cuda::CopySpan>& spans);
  char* sequence_hidden_row(int64_t slot, int64_t position) const;
  struct DeviceRows {
    const void* data = nullptr;
    int64_t rows = 0;
  };
  void mtp_forward_device(std::span<const int32_t> tokens, std::span<const DeviceRows> pieces, SequenceState& state,
                          const TensorView& logits);
  void allocate_sampling(int64_t rows);

  std::unique_ptr<CudaForward> model_;
  CudaModelOptions options_;
  cudaStream_t stream_ = nullptr;
  DeviceCache cache_;
  // Sequences are made through a const Model: admitting one changes the cache's bookkeeping.
  mutable HybridCache kv_cache_;
  mutable int64_t next_own_entry_ = -1;  // entries sequences admit themselves under (the engine's ids are > 0)
  mutable std::vector<const CudaSequence*> slot_sequences_;  // the live sequence in each slot, or null
  std::vector<std::unique_ptr<SequenceState>> own_bench_sequences_;  // decode_step's, where too few live
  std::vector<const CudaSequence*> step_sequences_;  // decode_step's batch (reused)
  int64_t max_tokens_ = 0, max_seqs_ = 0, logit_rows_ = 0;
  mutable std::vector<bool> mtp_slot_used_;
  bool emit_logits_ = true;

  // The uploaded step: metadata i32 [tokens T | token_seq T | positions T | seq_start S+1 |
  // slots S | last_index rows | window_entry S], its pinned staging and the event after the copy
  // (the next upload waits for it before rewriting the staging), and what the host knows of it.
  cuda::DeviceBuffer metadata_;
  int32_t* host_metadata_ = nullptr;
  size_t metadata_ints_ = 0;
  cudaEvent_t metadata_uploaded_ = nullptr;
  cuda::StepLayout layout_;
  const int32_t* token_ids_ = nullptr;
  const int32_t* last_index_ = nullptr;
  const int32_t* window_entry_ = nullptr;
  bool writes_window_ = false;
  int64_t kv_tokens_ = 0, longest_seq_ = 0, shortest_seq_ = 0;
  DeltaRuleChoice delta_rule_ = DeltaRuleChoice::kAuto;
  bool tapping_ = false;  // inside forward(): its steps carry the tap sink
  Layout scratch_layout_;  // reused: no step allocates

  uint16_t* host_logits_ = nullptr;  // pinned staging for bf16 logits on their way to f32
  std::map<int64_t, cudaGraphExec_t> graphs_;  // decode graphs by batch size
  void drop_graphs();

  // Device sampling: the sampled rows' parameters and tokens, on the device and pinned on the host.
  struct Sampling {
    cuda::DeviceBuffer params, tokens;
    SampleRowParams* host_params = nullptr;
    int32_t* host_tokens = nullptr;
    int32_t* host_argmax = nullptr;
    int64_t rows = 0;
    std::vector<int64_t> greedy_rows;                    // kToken rows that take the step's argmax
    std::vector<std::pair<int64_t, int64_t>> host_rows;  // [first, count) runs of kLogits rows
    Sampling() = default;
    Sampling(const Sampling&) = delete;
    Sampling& operator=(const Sampling&) = delete;
    ~Sampling();
  } sampling_;

  // MTP: the target's hidden states kept by the last forward() ([max_positions, H] act, made when
  // a drafter first asks), the rings target sequences keep ([S, rows, H], made at the first
  // keep_hidden step) and each head sequence's last output row ([S, H]).
  bool keep_hidden_states_ = false;
  PositionRange kept_positions_;
  cuda::DeviceBuffer kept_hidden_, sequence_hidden_, mtp_output_;
  int64_t sequence_hidden_rows_ = 0;
};

}  // namespace vt
