// A model's forward on CUDA, as the runner (runtime/cuda_runner.h) drives it. The runner owns what
// every CUDA model shares: the step's layout on the device, the cache's memory (cache/), CUDA
// graphs, logits on their way to the host and sampling; the model owns its weights and
// activations and runs its layers over one uploaded step.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cuda/stream.h"
#include "model/linear.h"
#include "model/model.h"
#include "ops/step_layout.h"

namespace vt {

// Tensor parallelism: sums a rank's partial [count] elements of `dtype` across the ranks, in place,
// enqueued on `stream` (NCCL; captured into CUDA graphs with the rest of the step).
using DeviceAllReduce = std::function<void(void* data, int64_t count, DType dtype, cudaStream_t stream)>;

// How a CUDA model and its runner are built: the activations' dtype, the step and cache sizes the
// buffers are made for, and the model's options.
struct CudaModelOptions {
  DType activations = DType::kBF16;  // f32 for bit-tight comparisons with the CPU reference
  int64_t max_sequences = 1;
  int64_t max_context = 4096;     // tokens per sequence
  int64_t max_step_tokens = 2048; // tokens per step (prefill chunk + decodes)
  int64_t block_size = 32;        // KV block (tokens)
  // KV blocks in the device pool all sequences share (the runner's HybridCache hands them out,
  // Model::kv_cache()), so many short sequences and few long ones fit the same memory; 0:
  // max_sequences x the blocks of max_context (every sequence at its longest).
  int64_t cache_blocks = 0;
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
  // Prefill attention: the sequences of a step with many new tokens on FlashInfer's sm90 kernel
  // (cuda::prefill_attention; bf16, head_dim 256, where the build found FlashInfer); off: every
  // token on the flash-decoding kernels (cuda::paged_attention), for A/B runs.
  bool prefill_attention = true;
  // Batch invariance: a sequence's logits have the same bits whatever else its steps carry (other
  // requests, prompt chunks cut anywhere, batch sizes), so greedy text through `vt serve` under load
  // is `vt generate`'s. Dense linears on one per-row kernel for every M (cuda::dense_gemv_rows;
  // cuBLASLt picks its algorithm by M), FP8 ones on the mma kernel at every M (its K split fixed),
  // every token's attention on the flash-decoding kernel with the key splits of a sequence alone,
  // the delta rule token by token. Slower; models without experts only (refused at load otherwise).
  bool batch_invariant = false;
  // The CUDA device the model lives on (a tensor-parallel rank's GPU); its weights must have been
  // made there, and every call must come from a thread with it current.
  int device = 0;
};

// What one layer keeps per sequence: an attention layer's KV rows, or a linear-attention (Gated
// DeltaNet) layer's conv and recurrent state.
struct CacheLayerSpec {
  bool attention = false;
  int64_t kv_heads = 0, head_dim = 0;                 // KV rows [kv_heads, head_dim] act
  int64_t conv_channels = 0, conv_history = 0;        // conv state [channels, history] f32
  int64_t state_heads = 0, state_k = 0, state_v = 0;  // recurrent state [heads, k, v] f32
};

struct CacheSpec {
  DType activations = DType::kBF16;  // the KV rows' dtype
  std::vector<CacheLayerSpec> layers;
  // The MTP head's attention layer (its own sequences' KV rows), where the model has one.
  bool has_mtp = false;
  CacheLayerSpec mtp;
};

// One layer's cache memory, device pointers (null where the layer keeps no such state).
struct LayerCache {
  void* k = nullptr;  // [blocks * block_size, kv_heads, head_dim] act
  void* v = nullptr;
  float* conv = nullptr;       // [slots, channels, history] f32
  float* recurrent = nullptr;  // [slots, heads, k, v] f32
  // Rollback windows: per sequence slot `window_entries` copies, [S, entries, <state>] f32.
  float* conv_window = nullptr;
  float* recurrent_window = nullptr;
};

// One step as the runner uploaded it: device pointers, valid until the next upload.
struct CudaStep {
  int64_t num_tokens = 0, num_seqs = 0, logit_rows = 0;
  const int32_t* token_ids = nullptr;  // [T]
  cuda::StepLayout layout;             // token_seq, positions, seq_start, block tables, slots
  // The same arrays on the host (the upload's pinned staging, valid until the next upload; no
  // block tables): for what a model plans on the host per step (the prefill attention's work).
  cuda::StepLayout host_layout;
  const int32_t* last_index = nullptr; // [logit_rows]: the rows that get logits
  // Rollback: each sequence's first token writes window entry window_entry[s] and on (-1: none).
  const int32_t* window_entry = nullptr;
  int64_t window_entries = 0;
  bool writes_window = false;
  int64_t kv_tokens = 0;    // keys the step's tokens attend to (sum of position + 1), for profiles
  int64_t longest_seq = 0, shortest_seq = 0;  // tokens of the step's longest and shortest sequence
  DeltaRuleChoice delta_rule = DeltaRuleChoice::kAuto;
  std::span<const LayerCache> cache;  // one per layer
  // Model::set_tap's sink during a forward() (never a batched or graph-replayed step): the model
  // copies named activations to the host for it, waiting for the stream each time.
  const TapSink* tap = nullptr;
};

class CudaForward {
 public:
  virtual ~CudaForward() = default;
  virtual const ModelInfo& info() const = 0;
  virtual std::string describe() const = 0;
  virtual DType activations() const = 0;
  virtual int64_t hidden_size() const = 0;
  virtual CacheSpec cache_spec() const = 0;
  // The stream every step runs on (the model's GEMMs keep per-stream resources on it).
  virtual cudaStream_t stream() const = 0;
  // Runs the layers over `step`: logits() [logit_rows, vocab] act, next_tokens() their argmax,
  // hidden() the final norm's output [num_tokens, hidden] act.
  virtual void run_step(const CudaStep& step) = 0;
  virtual const void* logits() const = 0;
  virtual const int32_t* next_tokens() const = 0;
  virtual const void* hidden() const = 0;
  // Whether the model can run `step`'s sequences of >= chunked_from tokens in the chunked delta
  // rule (forward(): DeltaRuleChoice::kChunked).
  virtual bool supports_chunked_delta_rule() const { return false; }

  // The multi-token-prediction head, where the model has one: its pairs (token, the target's
  // lm_head input `hidden` [T, H] act) over `head`'s KV rows; the last pair's output (its lm_head
  // input) goes to output_row [H] act and its logits to logits().
  virtual bool has_mtp() const { return false; }
  virtual void run_mtp_step(const CudaStep& step, const void* hidden, const LayerCache& head, void* output_row) {
    (void)step, (void)hidden, (void)head, (void)output_row;
    VT_FAIL("MTP: ", info().architecture, " has no MTP head on CUDA");
  }

  // The output layer as FP8 128x128 blocks run W8A8 (Model::quantize_lm_head_fp8).
  virtual void quantize_lm_head_fp8(const Fp8Quantization& quantization) = 0;
  // Tensor parallelism: sums the row-parallel outputs across ranks (set before the first step).
  virtual void set_all_reduce(DeviceAllReduce all_reduce) = 0;
  virtual bool tensor_parallel() const = 0;
  // Bytes one decode step must move at `batch` and `context` (weights, state, KV): the floor.
  virtual double decode_bytes(int64_t batch, int64_t context) const = 0;
};

}  // namespace vt
