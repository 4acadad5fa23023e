// The Qwen3.5-family forward on CUDA: weights on the device (BF16/F32 through cuBLASLt, FP8
// 128x128 block-scaled through vt's kernels), dense and MoE FFNs, the MTP head; run over steps
// mixing prefill and decode that the runner (runtime/cuda_runner.h) uploads.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device_buffer.h"
#include "io/weight_store.h"
#include "model/cuda_forward.h"
#include "model/linear.h"
#include "model/model.h"
#include "models/qwen3_5/config.h"
#include "ops/attention/attention.h"
#include "ops/embedding/embedding.h"
#include "ops/gdn/gdn.h"
#include "ops/gemm/cublaslt_gemm.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/registry.h"
#include "ops/norm/norm.h"
#include "ops/sampling/sampling.h"
#include "ops/step_layout.h"

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
// activation dtype or as e4m3 codes with 128x128 block scales per expert. A shared expert of the
// routed experts' width and format (on this rank) is folded in: stacked as expert E (gate_up
// [E + 1, 2I, H], down [E + 1, H, I]) and its gate as router row E ([E + 1, H]), so the routed
// experts' launches serve it too (cuda::moe_route's shared_expert); `shared` and `shared_gate`
// are then empty. Otherwise they hold it as its own MLP and [1, H] gate.
struct CudaMoe {
  CudaLinear router;  // [router_rows(), H]: E rows, row E the folded shared gate, zero rows to pad
  WeightFormat format = WeightFormat::kDense;
  cuda::DeviceBuffer gate_up, gate_up_scales, down, down_scales;
  int64_t experts = 0, intermediate = 0;  // routed experts, the stacked width (this rank's)
  bool has_shared = false, shared_folded = false;
  CudaMlp shared;
  CudaLinear shared_gate;  // [1, H]
  int64_t stacked() const { return experts + (shared_folded ? 1 : 0); }
  // The router's rows (and its logits' row stride): stacked() rounded up to 4 (zero rows), so the
  // f32 logits' rows stay 16-byte aligned for cuBLASLt at prefill sizes. (It did not bring back
  // cuBLASLt's Hopper kernel at decode sizes: see kRouterRowsKernelMaxTokens.)
  int64_t router_rows() const { return (stacked() + 3) / 4 * 4; }
  size_t expert_bytes() const;  // one stacked expert's gate_up + down (with scales)
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

// The Qwen3.5 family's forward on CUDA (model/cuda_forward.h): the runner (runtime/) uploads each
// step and owns the cache; this class runs the layers over them, top to bottom as the CPU
// reference (model.cpp) does.
class Qwen35CudaForward final : public CudaForward {
 public:
  Qwen35CudaForward(Qwen35Config config, CudaWeights weights, const CudaModelOptions& options,
                    std::string description);
  ~Qwen35CudaForward() override;

  const ModelInfo& info() const override { return info_; }
  std::string describe() const override { return description_; }
  DType activations() const override { return options_.activations; }
  int64_t hidden_size() const override { return config_.hidden_size; }
  CacheSpec cache_spec() const override;
  cudaStream_t stream() const override { return stream_; }
  void run_step(const CudaStep& step) override;
  const void* logits() const override;
  const int32_t* next_tokens() const override;
  const void* hidden() const override;
  bool supports_chunked_delta_rule() const override;
  bool has_mtp() const override { return weights_.mtp.has_value(); }
  void run_mtp_step(const CudaStep& step, const void* hidden, const LayerCache& head, void* output_row) override;
  void quantize_lm_head_fp8(const Fp8Quantization& quantization) override;
  void set_all_reduce(DeviceAllReduce all_reduce) override { all_reduce_ = std::move(all_reduce); }
  bool tensor_parallel() const override { return bool(all_reduce_); }
  double decode_bytes(int64_t batch, int64_t context) const override;

  const Qwen35Config& config() const { return config_; }
  const CudaWeights& weights() const { return weights_; }
  // The FP8 GEMM choices made at start-up (empty for a BF16 model).
  const std::string& gemm_plan() const { return gemm_plan_; }

 private:
  struct Workspace;
  // Dense linears up to this many outputs run vt's block-per-row GEMV at small M.
  static constexpr int64_t kNarrowDense = 4096;
  // y = x W^T; an FP8 linear reads `fused` when set, else quantises x itself (cuda_linear.cpp).
  // `on`: the stream a dense linear runs on (the side stream; FP8 linears run on stream_ only).
  void linear(const CudaLinear& linear, void* y, const void* x, int64_t m, const Fp8Rows& fused = {},
              cudaStream_t on = nullptr);
  // Whether an FP8 linear reads codes fused into the op before it.
  bool fused_fp8(const CudaLinear& linear) const {
    return options_.fuse_fp8_quantization && linear.format == WeightFormat::kFp8Block;
  }
  // A block's output projection (o_proj, the GDN out_proj, the MLP down) into the residual branch:
  // left as the GEMM's partials for the norm after it where the GEMM registry measured that
  // fastest with its norm (no tensor-parallel sum between), else written into branch (and summed
  // over ranks). branch_input() is what the next norm adds.
  void project_branch(const CudaLinear& linear, const void* x, int64_t num_tokens, const Fp8Rows& fused);
  cuda::Branch branch_input() const;
  void reduce_branch(int64_t num_tokens);  // all_reduce_ over workspace branch [T, H], when set
  // The blocks of one decoder layer over the step's tokens, on the workspace's residual stream x:
  // input_norm adds `pending` (the previous block's output; null: none) and norms, returning the
  // FP8 codes it fused for the mixer's first linear; attention and gated_delta_net run the mixer
  // over the layer's cache into branch; ffn adds branch, norms and runs the MLP or MoE into branch.
  Fp8Rows input_norm(const CudaLayer& layer, int64_t num_tokens, cuda::Branch pending);
  // x [T, H] = the embeddings of the step's tokens (`op`: the profile's name for it).
  void embed(const char* op, const CudaStep& step);
  // The step's rows of a named activation [num_tokens, cols] act to step.tap (as f32), where a
  // forward() installed one: the CPU model's names and layers, for `vt eval layers`.
  void tap(const CudaStep& step, const char* name, int layer, const void* data, int64_t cols) const;
  cuda::AttentionShape attention_shape() const;
  // Prefill attention's buffers and plan, where cuda::prefill_attention serves the model
  // (CudaModelOptions::prefill_attention; cuda_attention.cpp).
  void setup_prefill_attention();
  // Splits the step's attention tokens (once per step, before its layers): sequences of at least
  // kPrefillAttentionMinTokens new tokens to prefill_attention (planned on the host, the plan
  // copied to the device), the other tokens to paged_attention.
  void plan_attention(const CudaStep& step);
  void attention(const CudaLayer& layer, const LayerCache& cache, const CudaStep& step, const Fp8Rows& mixer_in);
  // Sequences of >= chunked_from tokens take the chunked delta rule (0: all token by token).
  void gated_delta_net(const CudaLayer& layer, const LayerCache& cache, const CudaStep& step, const Fp8Rows& mixer_in,
                       int64_t chunked_from);
  void ffn(const CudaLayer& layer, int64_t num_tokens);
  void moe(const CudaMoe& moe, int64_t num_tokens, const Fp8Rows& normed_codes);
  // The distinct experts `tokens` tokens route to when each chooses k of E uniformly:
  // E (1 - (1 - k/E)^tokens), an estimate (routing happens on the device), for the floor's bytes.
  double expected_experts(int64_t tokens) const;
  void setup_fp8_gemms(int64_t max_step_tokens);  // every linear's backend, for up to that many rows
  void convert_lm_head_fp8(int64_t exact_columns);

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
  // The (token, KV head, split) blocks an attention launch aims at, fixed at construction (the
  // kernel's own count): it sizes the partials and each launch's splits.
  int64_t attention_blocks_ = 0;
  DeviceAllReduce all_reduce_;
  std::string gemm_plan_;
};

// A checkpoint folder's config and weights on the current device, and its description.
struct Qwen35CudaCheckpoint {
  Qwen35Config config;
  CudaWeights weights;
  std::string description;
};
Qwen35CudaCheckpoint load_qwen35_cuda_checkpoint(const std::string& dir, const CudaModelOptions& options);
// `name`'s real architecture (synthetic_config) with random weights ("fp8" 128x128 blocks or
// "bf16"), described as "NAME (synthetic, WEIGHTS)".
Qwen35CudaCheckpoint synthetic_cuda_checkpoint(const std::string& name, const std::string& weights, uint64_t seed);

}  // namespace vt
