// The Qwen3.5-family forward on CUDA: weights on the device (BF16/F32 through cuBLASLt, FP8
// 128x128 block-scaled through vt's kernel), a paged KV cache and GDN state slots allocated at
// start-up, batched steps mixing prefill and decode, and CUDA-graph decode. Dense FFN only so far.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/device_buffer.h"
#include "backends/cuda/fp8_gemm_registry.h"
#include "io/weight_store.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/mtp_head.h"
#include "models/qwen3_5_config.h"

typedef struct CUevent_st* cudaEvent_t;

namespace vt {

// A Linear on the device, possibly several checkpoint tensors stacked along N. Parts whose rows
// are not whole FP8 blocks stay separate launches writing their column range of the output.
struct CudaLinear {
  struct Part {
    cuda::DeviceBuffer weight;  // [n, k]: act dtype (dense) or e4m3 bytes (fp8)
    cuda::DeviceBuffer scales;  // fp8: [ceil(n/128), ceil(k/128)] f32
    int64_t n = 0, column = 0;
  };
  WeightFormat format = WeightFormat::kDense;
  std::vector<Part> parts;
  int64_t n = 0, k = 0;
  // An FP8 output layer's exact columns (Fp8Quantization::exact_columns): their indices (i32
  // [count], ascending) and weights as stored ([n, count], act), zero in the FP8 matrix; the
  // product with the unquantised input is added to the GEMM's (cuda::exact_columns_add).
  cuda::DeviceBuffer exact_columns, exact_weight;
  int64_t exact_count = 0;
  size_t bytes() const;
};

struct CudaMlp {
  CudaLinear gate_up, down;
};

// MoE FFN: experts stacked [E, 2I, H] (gate rows, then up rows) and [E, H, I], in the
// activation dtype or as e4m3 codes with 128x128 block scales per expert.
struct CudaMoe {
  CudaLinear router;  // [E, H]
  WeightFormat format = WeightFormat::kDense;
  cuda::DeviceBuffer gate_up, gate_up_scales, down, down_scales;
  int64_t experts = 0, intermediate = 0;
  bool has_shared = false;
  CudaMlp shared;
  CudaLinear shared_gate;  // [1, H]
  size_t expert_bytes() const;  // one expert's gate_up + down (with scales)
};

struct CudaLayer {
  LayerKind kind;
  cuda::DeviceBuffer input_norm, post_attention_norm;  // f32 [H]
  // Gated DeltaNet
  CudaLinear in_proj, in_proj_ba, out_proj;
  cuda::DeviceBuffer conv_weight, a_log, dt_bias, gdn_norm;  // f32
  // Gated attention
  CudaLinear qkv, o_proj;
  cuda::DeviceBuffer q_norm, k_norm;  // f32 [D]
  bool is_moe = false;
  CudaMlp mlp;
  CudaMoe moe;
};

// The multi-token-prediction head (checkpoint `mtp.*`; Qwen35Model's MtpWeights on the device):
// for the target's lm_head input h at position p and the token x at p + 1,
// out = norm(layer(fc([norm_e(embed(x)) | norm_h(h)]))) is its own lm_head input, predicting the
// token at p + 2. Embeddings and lm_head are the model's.
struct CudaMtp {
  cuda::DeviceBuffer pre_fc_norm_embedding, pre_fc_norm_hidden;  // f32 [H], zero-centred
  CudaLinear fc;                                                 // [H, 2H]: input [embedding | hidden]
  CudaLayer layer;           // one full-attention decoder layer, its FFN of layer 0's kind
  cuda::DeviceBuffer norm;   // f32 [H], zero-centred
  size_t bytes() const;
};

struct CudaWeights {
  cuda::DeviceBuffer embed_tokens;  // [V, H] as stored (bf16/f16/f32)
  std::vector<CudaLayer> layers;
  cuda::DeviceBuffer final_norm;  // f32 [H]
  CudaLinear lm_head;
  std::optional<CudaMtp> mtp;  // loaded with CudaModelOptions::load_mtp
  size_t bytes() const;        // the target's (a decode step reads them all); without the MTP head
};

struct CudaModelOptions {
  DType activations = DType::kBF16;  // f32 for bit-tight comparisons with the CPU reference
  int64_t max_sequences = 1;
  int64_t max_context = 4096;     // tokens per sequence
  int64_t max_step_tokens = 2048; // tokens per step (prefill chunk + decodes)
  int64_t block_size = 32;        // KV block (tokens)
  int64_t max_logit_rows = 1;     // rows of logits one step can produce (all-position logits: more)
  // Output layer: as stored (BF16 in published checkpoints) or quantised at load to FP8 128x128
  // blocks (`--lm-head fp8`; its drift is measured by `vt eval drift`), with its
  // lm_head_exact_columns input columns of largest norm kept out of FP8 (a multiple of 8, <= 64;
  // `--lm-head-exact-columns`).
  bool fp8_lm_head = false;
  int64_t lm_head_exact_columns = kDefaultLmHeadExactColumns;
  // Time the FP8 GEMM backends on this model's shapes at start-up and keep the fastest per M
  // bucket (cached on disk); off: the built-in rule (gemv at M = 1, tensor-core MMA above).
  bool tune_gemms = true;
  // FP8 GEMM backends the tuning leaves out (names as gemm_backend_name: A/B runs of a backend).
  std::vector<std::string> gemm_exclude;
  // Speculative decoding: the most tokens a sequence's rollback window holds (a verify of k drafts
  // needs k + 1). > 0 keeps, per sequence slot and GDN layer, max_rollback_tokens + 1 copies of the
  // recurrent and conv state (27B: 151 MB per copy) so Model::rollback can set any length in the
  // window; 0: no rollback (supports_rollback() is false).
  int64_t max_rollback_tokens = 0;
  // Load the checkpoint's `mtp.*` head for the MTP drafter (required then, every tensor of it
  // consumed; Qwen35LoadOptions::load_mtp on the CPU). Off: declared ignored. With the head the
  // model also keeps its KV cache for max_sequences head sequences. (Any model, at its first
  // keep_hidden forward, makes per sequence slot a ring of min(max_step_tokens, positions) hidden
  // states for the serving engine's MTP drafters: 27B in bf16, 512-token steps, 64 slots: 335 MB.)
  bool load_mtp = false;
  // The GDN b/a projection at decode on a second stream beside the in_proj GEMM (a branch of the
  // step's graph); off: in line (the same kernel, bit for bit).
  bool side_stream = true;
  // FP8 activation codes made by the op that produces a linear's input (norms, SwiGLU, the GDN
  // output, the attention combine); off: a quantise kernel in front of each linear (bit for bit).
  bool fuse_fp8_quantization = true;
  // The CUDA device the model lives on (a tensor-parallel rank's GPU); its weights must have been
  // made there, and every call must come from a thread with it current.
  int device = 0;
};

// Tensor parallelism: sums a rank's partial [count] elements of `dtype` across the ranks, in place,
// enqueued on `stream` (NCCL; captured into CUDA graphs with the rest of the step).
using DeviceAllReduce = std::function<void(void* data, int64_t count, DType dtype, cudaStream_t stream)>;

class TensorParallelPlan;

// Loads a checkpoint folder's weights onto the current device (checks shapes/dtypes, consumes
// all). With a plan: only rank `rank`'s slices (its heads, channels, rows and columns), for a
// model built with plan->rank_config(rank). load_mtp: the `mtp.*` head too (not with a plan).
CudaWeights load_cuda_weights(WeightStore& store, const Qwen35Config& config, DType activations,
                              const TensorParallelPlan* plan = nullptr, int rank = 0, bool load_mtp = false);
// Random weights at the config's real shapes, made on the device (FP8 block-scaled or BF16).
CudaWeights synthetic_cuda_weights(const Qwen35Config& config, bool fp8, uint64_t seed);
// The real architectures by name: "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3-next-80b".
Qwen35Config synthetic_config(const std::string& name);

// FP8 codes [m, k] and 1x128 scales of a linear's input, made by the op that produced it.
struct Fp8Rows {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
};

class Qwen35CudaModel final : public Model, public MtpHead {
 public:
  Qwen35CudaModel(Qwen35Config config, CudaWeights weights, const CudaModelOptions& options,
                  std::string description);
  ~Qwen35CudaModel() override;

  // Model interface (one sequence per call; logits copied to the host as f32).
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const override;
  void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
               const ForwardOptions& options) override;
  std::string describe() const override { return description_; }
  // One batched step over every item (prefill chunks, decode tokens and verify steps mixed; an
  // all_logits item gets a row per token, CudaModelOptions::max_logit_rows bounds the total); an
  // all-decode batch replays the CUDA graph captured for its size (the layout lives in device memory).
  void forward_batch(std::span<const BatchItem> items, const TensorView& logits) override;
  // The same step, then one launch of cuda::sample_rows over the sampled kToken rows (greedy ones
  // take the step's argmax): only their ids and the kLogits rows come back
  // (qwen3_5_cuda_sampling.cpp).
  bool supports_device_sampling() const override { return true; }
  void forward_batch_sample(std::span<const BatchItem> items, std::span<const RowOutput> rows,
                            std::span<int32_t> tokens, const TensorView& logits) override;
  void quantize_lm_head_fp8(const Fp8Quantization& quantization = {}) override;
  // Rollback from per-token state checkpoints: a keep_rollback step also saves each GDN layer's
  // state after every token into the sequence's window (entry 0: the state where it opened);
  // rollback copies an entry back. KV entries past the length are simply overwritten later.
  bool supports_rollback() const override { return options_.max_rollback_tokens > 0; }
  void rollback(SequenceState& state, int64_t length) override;
  void commit(SequenceState& state) override;
  // Greedy verification without host logits: the items run as one batched step (keep_rollback
  // per item, never a CUDA graph) and `next_tokens` gets the device argmax after every token,
  // item after item (speculative benchmarks and greedy verify loops).
  void verify_greedy(std::span<const BatchItem> items, std::vector<int32_t>* next_tokens);

  // Batched decode for benchmarks: one token for each of `batch` sequences (slots 0..batch-1)
  // at context length `positions[i]`; greedy next ids on the device. Captured as a CUDA graph
  // per batch size on first use when `use_graph`.
  void decode_step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                   std::vector<int32_t>* next_tokens, bool use_graph);
  // The logits [rows, vocab] of the last step, as f32 on the host (tests).
  std::vector<float> last_logits(int64_t rows);
  // Fills KV cache and GDN states with random values (benchmarks at a context length).
  void randomize_state(uint64_t seed);
  // Bytes one decode step must move at `batch` and `context`: weights + state + KV (floor).
  double decode_bytes(int64_t batch, int64_t context) const;
  const Qwen35Config& config() const { return config_; }
  const CudaWeights& weights() const { return weights_; }
  cudaStream_t stream() const { return stream_; }
  // The FP8 GEMM choices made at start-up (empty for a BF16 model).
  const std::string& gemm_plan() const { return gemm_plan_; }
  // Tensor parallelism: this model is one rank (built with the plan's rank config and slices);
  // `all_reduce` sums the row-parallel outputs (o_proj, out_proj, down, MoE combine) across the
  // ranks. Set before the first step (captured graphs contain it).
  void set_all_reduce(DeviceAllReduce all_reduce);
  // Off for every rank but one: steps leave the logits on the device (no host copy, no host
  // writes to the caller's buffer; next tokens still made on the device).
  void set_emit_logits(bool emit) { emit_logits_ = emit; }

  // The MTP head (model/mtp_head.h; qwen3_5_cuda_mtp.cpp). Hidden states stay on the device: a
  // forward() with keeping on copies every position's final-norm output aside (decode_step keeps
  // none), and a forward or forward_batch item with keep_hidden copies its rows into its
  // sequence's ring (Workspace::sequence_hidden: at most min(max_step_tokens, positions) unread
  // rows per sequence; device-to-device copies, one launch per step, after the CUDA graph when the
  // step replays one). The head's sequences are KV caches of its attention layer in their own
  // max_sequences slots. One sequence per call, logits copied to the host as f32; not on a
  // tensor-parallel rank.
  bool has_mtp() const override { return weights_.mtp.has_value(); }
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
  // The hidden states kept by the last forward(), [kept_hidden_positions().count, H], those a
  // target sequence keeps, [sequence_hidden_positions(target).count, H], and the output a head
  // sequence's last pair left for chaining, [H], as f32 on the host (tests).
  std::vector<float> kept_hidden_states();
  std::vector<float> sequence_hidden_states(const SequenceState& target);
  std::vector<float> mtp_last_output(const SequenceState& state);

 private:
  struct Workspace;
  struct Graphs;
  // Device sampling (qwen3_5_cuda_sampling.cpp): the sampled rows' parameters and tokens, on the
  // device and in pinned host memory, for as many rows as a step has logits; made at construction.
  struct SamplingBuffers {
    cuda::DeviceBuffer params;  // [rows] SampleRowParams (as bytes)
    cuda::DeviceBuffer tokens;  // [rows] i32
    SampleRowParams* host_params = nullptr;
    int32_t* host_tokens = nullptr;
    int32_t* host_argmax = nullptr;  // [rows] the step's argmax_rows (greedy rows)
    int64_t rows = 0;
    // A step's row lists (reserved for `rows` at allocation, so no step allocates):
    std::vector<int64_t> greedy_rows;                    // kToken rows that take argmax_rows
    std::vector<std::pair<int64_t, int64_t>> host_rows;  // [first, count) runs of kLogits rows
    SamplingBuffers() = default;
    SamplingBuffers(const SamplingBuffers&) = delete;
    SamplingBuffers& operator=(const SamplingBuffers&) = delete;
    ~SamplingBuffers();
  };
  void run_step(int64_t num_tokens, int64_t num_seqs, int64_t logit_rows);  // metadata on the device
  // Dense linears up to this many outputs run vt's block-per-row GEMV at small M (cuda_ops.h).
  static constexpr int64_t kNarrowDense = 4096;
  // y = x W^T; an FP8 linear reads `fused` when set, else quantises x itself.
  // `on`: the stream a dense linear runs on (the side stream; FP8 linears run on stream_ only).
  void linear(const CudaLinear& linear, void* y, const void* x, int64_t m, const Fp8Rows& fused = {},
              cudaStream_t on = nullptr);
  // Whether an FP8 linear reads codes fused into the op before it.
  bool fused_fp8(const CudaLinear& linear) const {
    return options_.fuse_fp8_quantization && linear.format == WeightFormat::kFp8Block;
  }
  // The blocks of one decoder layer over the uploaded step of `num_tokens` tokens from `num_seqs`
  // sequences, on the workspace's residual stream x: input_norm adds `pending` (the previous
  // block's output; null: none) and norms, returning the FP8 codes it fused for the mixer's first
  // linear; attention runs the gated attention over the paged caches k_cache/v_cache into branch;
  // ffn adds branch, norms and runs the FFN into branch.
  Fp8Rows input_norm(const CudaLayer& layer, int64_t num_tokens, cuda::Branch pending);
  // A block's output projection (o_proj, the GDN out_proj, the MLP down) into the residual branch:
  // left as the GEMM's partials for the norm after it where the GEMM registry measured that
  // fastest with its norm (no tensor-parallel sum between), else written into branch (and summed
  // over ranks). branch_input() is what the next norm adds.
  void project_branch(const CudaLinear& linear, const void* x, int64_t num_tokens, const Fp8Rows& fused);
  cuda::Branch branch_input() const;
  // The uploaded step's layout (device arrays) for `num_tokens` tokens of `num_seqs` sequences.
  cuda::StepLayout step_layout(int64_t num_tokens, int64_t num_seqs) const;
  // The gated attention layers' shape (heads, head_dim, RoPE, the cache's block size).
  cuda::AttentionShape attention_shape() const;
  void attention(const CudaLayer& layer, void* k_cache, void* v_cache, int64_t num_tokens, int64_t num_seqs,
                 const Fp8Rows& mixer_in);
  // The Gated DeltaNet mixer of layer `index` into branch (qwen3_5_cuda_gdn.cpp); sequences of
  // >= chunked_from tokens take the chunked delta rule (0: all token by token).
  void gated_delta_net(const CudaLayer& layer, size_t index, int64_t num_tokens, int64_t num_seqs,
                       const Fp8Rows& mixer_in, int64_t chunked_from);
  void ffn(const CudaLayer& layer, int64_t num_tokens);
  // One MTP step over the uploaded pairs of one head sequence in `mtp_slot`: hidden [T, H] act on
  // the device; leaves the last pair's output in the slot's row of mtp_output and its logits.
  void run_mtp_step(int64_t num_tokens, const void* hidden, int64_t mtp_slot);
  // `count` values of act dtype on the device, as f32 on the host.
  std::vector<float> download(const void* data, int64_t count);
  // Consecutive rows [rows, H] act on the device: one piece of the hidden states of a run of pairs.
  struct DeviceRows {
    const void* data = nullptr;
    int64_t rows = 0;
  };
  // Runs `tokens` with their hidden states, `pieces` one after the other ([T, H] in all), on a head
  // sequence, in chunks of the step size.
  void mtp_forward_device(std::span<const int32_t> tokens, std::span<const DeviceRows> pieces, SequenceState& state,
                          const TensorView& logits);
  // Per-sequence hidden states (keep_hidden). check_sequence_hidden refuses a forward of `tokens`
  // from the sequence's length whose unread rows would pass the ring (before anything changes)
  // and makes the rings at the first; keep_sequence_hidden then drops the rows from the length on
  // (all of them after a gap) and appends the copies of workspace normed rows [normed_row,
  // normed_row + count) into the ring to `spans` (one copy_spans launch per step).
  void check_sequence_hidden(const SequenceState& state, int64_t tokens);
  void keep_sequence_hidden(SequenceState& state, int64_t normed_row, int64_t count,
                            std::vector<cuda::CopySpan>& spans);
  // The device address of position `position`'s row in a sequence slot's ring.
  char* sequence_hidden_row(int64_t slot, int64_t position) const;
  // workspace normed -> branch; normed_codes: the norm's fused FP8 output, if it made one.
  void moe(const CudaMoe& moe, int64_t num_tokens, const Fp8Rows& normed_codes);
  // window_entry [S]: the rollback-window entry each sequence's first token writes (-1 or
  // missing: none; the step then writes no window).
  void upload_layout(const std::vector<int32_t>& tokens, const std::vector<int32_t>& token_seq,
                     const std::vector<int32_t>& positions, const std::vector<int32_t>& seq_start,
                     const std::vector<int32_t>& slots, const std::vector<int32_t>& last_index,
                     const std::vector<int32_t>& window_entry = {});
  // Refuses a keep_rollback step of `tokens` whose window would pass max_rollback_tokens (before
  // anything changes); then prepare_window opens the window (entry 0 = the live state) or closes it.
  void check_window(const SequenceState& state, int64_t tokens, bool keep_rollback) const;
  void prepare_window(SequenceState& state, bool keep_rollback);
  // Copies every GDN layer's state of `slot` to (into_window) or from its window entry `entry`.
  void copy_window_entry(int64_t slot, int64_t entry, bool into_window);
  // One batched step of `items` (every token's logits when all_rows or the item's all_logits, else
  // each item's last);
  // advances the states and returns the logit rows.
  int64_t run_batch(std::span<const BatchItem> items, bool all_rows);

  Qwen35Config config_;
  CudaWeights weights_;
  CudaModelOptions options_;
  ModelInfo info_;
  std::string description_;
  cudaStream_t stream_ = nullptr;
  // A second stream for the GDN b/a projection at decode (a dense GEMV beside the in_proj GEMM and
  // the conv, joined before the delta rule: a branch of the step's graph), with its fork and join
  // events (CudaModelOptions::side_stream).
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  std::unique_ptr<cuda::CublasLtGemm> gemm_;
  std::unique_ptr<cuda::Fp8GemmRegistry> fp8_gemm_;  // when any linear is FP8
  std::unique_ptr<Workspace> workspace_;
  std::unique_ptr<Graphs> graphs_;
  SamplingBuffers sampling_;
  void allocate_sampling(int64_t rows);
  mutable std::vector<bool> slot_used_;
  mutable std::vector<bool> mtp_slot_used_;  // the MTP head's sequences (empty without the head)
  bool keep_hidden_states_ = false;
  PositionRange kept_positions_;  // of the hidden states in the workspace's kept_hidden
  // The (token, KV head, split) blocks an attention launch aims at, fixed at construction (the
  // kernel's own count): it sizes the partials and each launch's splits.
  int64_t attention_blocks_ = 0;
  bool emit_logits_ = true;
  DeviceAllReduce all_reduce_;
  void reduce_branch(int64_t num_tokens);  // all_reduce_ over workspace branch [T, H], when set
  std::string gemm_plan_;
  void setup_fp8_gemms(int64_t max_step_tokens);  // every linear's backend, for up to that many rows
  void convert_lm_head_fp8(int64_t exact_columns);
  void launch_decode_graph(int64_t batch, const std::function<void()>& upload);  // capture on first use
  void copy_logits_to_host(float* destination, int64_t rows);
  const void* device_logits() const;         // the step's logits [rows, vocab] act, on the device
  const int32_t* device_next_tokens() const;  // the step's argmax of each logit row [rows], on the device
  // Copies the logit rows [first, first + count) of each range into the same rows of destination
  // (host f32 [rows, vocab]), queued after the stream's work, and waits for the stream.
  void copy_logit_rows_to_host(float* destination, std::span<const std::pair<int64_t, int64_t>> ranges);
};

// Opens a checkpoint folder for CUDA.
std::unique_ptr<Qwen35CudaModel> load_qwen35_cuda(const std::string& dir, const CudaModelOptions& options);
// A synthetic model: `name`'s real architecture (synthetic_config), random weights ("fp8" 128x128
// blocks or "bf16"), described as "NAME (synthetic, WEIGHTS)".
std::unique_ptr<Qwen35CudaModel> make_synthetic_cuda_model(const std::string& name, const std::string& weights,
                                                           const CudaModelOptions& options, uint64_t seed);

}  // namespace vt
