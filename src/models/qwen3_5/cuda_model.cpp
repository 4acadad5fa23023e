// Qwen3.5 forward on CUDA, top to bottom like the diagram (the CPU reference in model.cpp is the
// oracle this is tested against): embed, then per layer the input norm, the mixer (gated
// attention or Gated DeltaNet, cuda_gdn.cpp), the FFN (MLP or MoE), then the final norm and the
// output layer. One step runs any mix of prefill chunks and decode tokens (runtime/cuda_runner.h
// uploads it); linears and the residual branch are cuda_linear.cpp's, the attention mixer
// cuda_attention.cpp's.
#include "models/qwen3_5/cuda_model.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "models/qwen3_5/cuda_workspace.h"
#include "ops/activation/activation.h"
#include "ops/attention/attention.h"
#include "ops/embedding/embedding.h"
#include "ops/gdn/gdn.h"
#include "ops/gemm/gemm.h"
#include "ops/moe/moe.h"
#include "ops/norm/norm.h"
#include "ops/sampling/sampling.h"
#include "trace/intent.h"

namespace vt {

using trace::OpGroup;

namespace {

// Sequences of a step with at least this many new tokens (a full chunk) run the chunked delta
// rule (cuda::gdn_chunked); shorter ones, decode tokens and verify steps run token by token.
constexpr int64_t kGdnChunkedMinTokens = cuda::kGdnChunk;
// Decode-sized router GEMMs (batches, verify steps) on the per-row GEMV kernel: cuBLASLt takes a
// non-Hopper kernel ("Kernel2") for the router's f32 output once its rows are not 256 (the folded
// shared gate makes them 260; H100, 2026-12-06), and at these M the weights (1 MB) sit in L2 for
// the row groups that reread them.
constexpr int64_t kRouterRowsKernelMaxTokens = 256;

// with_mtp: also the MTP head's fc input [normed embedding | normed hidden], 2H wide.
int64_t widest_projection(const Qwen35Config& c, bool with_mtp) {
  return std::max({c.conv_dim() + c.linear_value_dim(), c.num_heads * c.head_dim * 2 + 2 * c.num_kv_heads * c.head_dim,
                   2 * c.intermediate_size, 2 * c.shared_expert_intermediate_size, with_mtp ? 2 * c.hidden_size : 0});
}

// The MoE layers' shared experts (the MTP head's too): whether any is folded into the routed
// experts' launches, and whether any runs as its own MLP.
struct SharedExperts {
  bool folded = false, separate = false;
};

SharedExperts shared_experts(const CudaWeights& weights) {
  SharedExperts found;
  const auto visit = [&](const CudaLayer& layer) {
    if (!layer.is_moe || !layer.moe.has_shared) return;
    (layer.moe.shared_folded ? found.folded : found.separate) = true;
  };
  for (const auto& layer : weights.layers) visit(layer);
  if (weights.mtp) visit(weights.mtp->layer);
  return found;
}

int64_t widest_inner(const Qwen35Config& c) {
  return std::max({c.linear_value_dim(), c.num_heads * c.head_dim, c.intermediate_size, c.moe_intermediate_size,
                   c.shared_expert_intermediate_size});
}

}  // namespace


Qwen35CudaForward::Qwen35CudaForward(Qwen35Config config, CudaWeights weights, const CudaModelOptions& options,
                                     std::string description)
    : config_(std::move(config)), weights_(std::move(weights)), options_(options),
      description_(std::move(description)) {
  VT_CHECK(options_.activations == DType::kF32 || options_.activations == DType::kBF16, "CUDA activations f32 or bf16");
  VT_CUDA_CHECK(cudaSetDevice(options_.device));
  info_ = config_.model_info();
  info_.max_positions = std::min(config_.max_position_embeddings, options_.max_context);
  VT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (options_.side_stream) {
    VT_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
    VT_CUDA_CHECK(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming));
    VT_CUDA_CHECK(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming));
  }
  gemm_ = std::make_unique<cuda::CublasLtGemm>();
  if (options_.fp8_lm_head && weights_.lm_head.format == WeightFormat::kDense)
    convert_lm_head_fp8(options_.lm_head_exact_columns);

  const DType act = options_.activations;
  const int64_t T = std::max(options_.max_step_tokens, options_.max_sequences), S = options_.max_sequences;
  const int64_t H = config_.hidden_size, logit_rows = std::max(S, options_.max_logit_rows);
  auto& w = *(workspace_ = std::make_unique<Workspace>());
  w.max_tokens = T;
  w.max_seqs = S;
  w.x = cuda::DeviceBuffer(act, {T, H});
  w.normed = cuda::DeviceBuffer(act, {T, H});
  w.branch = cuda::DeviceBuffer(act, {T, H});
  const bool with_mtp = weights_.mtp.has_value();
  w.projected = cuda::DeviceBuffer(act, {T, widest_projection(config_, with_mtp)});
  w.ba = cuda::DeviceBuffer(act, {T, 2 * config_.linear_num_value_heads});
  w.conv_out = cuda::DeviceBuffer(DType::kF32, {T, config_.conv_dim()});
  w.mixer_out = cuda::DeviceBuffer(act, {T, widest_inner(config_)});
  w.q = cuda::DeviceBuffer(DType::kF32, {T, config_.num_heads * config_.head_dim});
  w.gate = cuda::DeviceBuffer(act, {T, config_.num_heads * config_.head_dim});
  // splits(T') x T' <= max(T', attention_blocks_ / Hkv) for every T' <= T.
  const int64_t group = config_.num_heads / std::max<int64_t>(config_.num_kv_heads, 1);
  attention_blocks_ = cuda::attention_target_blocks(attention_shape(), act);
  w.attention_partials = cuda::DeviceBuffer(
      DType::kF32, {std::max<int64_t>(attention_blocks_ * group, T * config_.num_heads) * (config_.head_dim + 2)});
  setup_prefill_attention();
  const int64_t widest_k = std::max({with_mtp ? 2 * H : H, widest_inner(config_)});
  // A folded shared expert is each token's (k+1)-th pair: the expert buffers hold T * (k + 1) rows.
  const SharedExperts shared = shared_experts(weights_);
  const int64_t top_k = std::max<int64_t>(config_.num_experts_per_tok, 1) + (shared.folded ? 1 : 0);
  for (auto [codes, scales] : {std::pair{&w.quantized, &w.scales}, std::pair{&w.inner, &w.inner_scales},
                                std::pair{&w.scratch, &w.scratch_scales}}) {
    *codes = cuda::DeviceBuffer(DType::kU8, {T * top_k, widest_k});
    *scales = cuda::DeviceBuffer(DType::kF32, {T * top_k, (widest_k + 127) / 128});
  }
  if (config_.num_experts > 0) {
    // Experts as stacked (the shared one last when folded); the words fit the unfolded layout too.
    const int64_t inter = config_.moe_intermediate_size, pairs = T * top_k,
                  stacked = config_.num_experts + (shared.folded ? 1 : 0);
    // f32: top-k must not see bf16 ties; rows padded as CudaMoe::router_rows pads them.
    w.router_logits = cuda::DeviceBuffer(DType::kF32, {T, (stacked + 3) / 4 * 4});
    w.route_words = cuda::DeviceBuffer(DType::kI32, {moe_routing_words(T, stacked, top_k)});
    w.route_weights = cuda::DeviceBuffer(DType::kF32, {pairs});
    w.expert_hidden = cuda::DeviceBuffer(act, {pairs, 2 * inter});
    w.expert_act = cuda::DeviceBuffer(act, {pairs, inter});
    w.expert_out = cuda::DeviceBuffer(act, {pairs, H});
    if (shared.separate) {
      w.shared_out = cuda::DeviceBuffer(act, {T, H});
      w.shared_gate = cuda::DeviceBuffer(act, {T, 1});
    }
  }
  w.last_hidden = cuda::DeviceBuffer(act, {logit_rows, H});
  w.logits = cuda::DeviceBuffer(act, {logit_rows, config_.vocab_size});
  w.next_tokens = cuda::DeviceBuffer(DType::kI32, {logit_rows});
  // The chunked delta rule's scratch: for batched steps (sequences of >= kGdnChunkedMinTokens)
  // and for a forward() that asks for chunks at any length (one sequence).
  const cuda::DeltaNetShape delta_net{config_.linear_num_key_heads, config_.linear_num_value_heads,
                                      config_.linear_key_head_dim, config_.linear_value_head_dim,
                                      config_.linear_conv_kernel, config_.rms_norm_eps};
  const bool has_gdn = std::find(config_.layer_types.begin(), config_.layer_types.end(),
                                 LayerKind::kLinearAttention) != config_.layer_types.end();
  if (has_gdn && cuda::gdn_chunked_supports(delta_net) && !options_.batch_invariant)
    w.gdn_chunk_scratch = cuda::DeviceBuffer(
        DType::kF32, {std::max(cuda::gdn_chunked_scratch_floats(T, S, kGdnChunkedMinTokens, delta_net),
                               cuda::gdn_chunked_scratch_floats(T, 1, 1, delta_net))});
  setup_fp8_gemms(workspace_->max_tokens);
  // The MoE router and grouping choose their kernels by M: no invariant path for experts yet.
  VT_CHECK(!options_.batch_invariant || config_.num_experts == 0,
           "batch-invariant mode runs models without experts; this one has ", config_.num_experts);
}

Qwen35CudaForward::~Qwen35CudaForward() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cuda::fp8_gemm_release(stream_);
    cudaStreamDestroy(stream_);
  }
  if (side_stream_) {
    cudaStreamSynchronize(side_stream_);
    cudaStreamDestroy(side_stream_);
    cudaEventDestroy(fork_event_);
    cudaEventDestroy(join_event_);
  }
}

CacheSpec Qwen35CudaForward::cache_spec() const {
  const auto& c = config_;
  CacheSpec spec;
  spec.activations = options_.activations;
  for (LayerKind kind : c.layer_types) {
    CacheLayerSpec layer;
    layer.attention = kind == LayerKind::kFullAttention;
    if (layer.attention) {
      layer.kv_heads = c.num_kv_heads;
      layer.head_dim = c.head_dim;
    } else {
      layer.conv_channels = c.conv_dim();
      layer.conv_history = c.linear_conv_kernel - 1;
      layer.state_heads = c.linear_num_value_heads;
      layer.state_k = c.linear_key_head_dim;
      layer.state_v = c.linear_value_head_dim;
    }
    spec.layers.push_back(layer);
  }
  spec.has_mtp = has_mtp();
  spec.mtp = {true, c.num_kv_heads, c.head_dim};
  return spec;
}

const void* Qwen35CudaForward::logits() const { return workspace_->logits.data(); }
const int32_t* Qwen35CudaForward::next_tokens() const { return workspace_->next_tokens.as<int32_t>(); }
const void* Qwen35CudaForward::hidden() const { return workspace_->normed.data(); }
bool Qwen35CudaForward::supports_chunked_delta_rule() const { return workspace_->gdn_chunk_scratch.data() != nullptr; }

// One step over the metadata already uploaded: num_tokens tokens from num_seqs sequences.
void Qwen35CudaForward::run_step(const CudaStep& step) {
  auto& w = *workspace_;
  const auto& c = config_;
  const DType act = options_.activations;
  const int64_t T = step.num_tokens, H = c.hidden_size;
  const float eps = c.rms_norm_eps;
  embed("embed", step);
  tap(step, "embed", -1, w.x.data(), H);
  cuda::Branch pending = nullptr;  // the previous block's output, added to x by the next norm
  // GDN: sequences of >= chunked_from tokens take the chunked delta rule; 0: all token by token
  // (decode steps and their graphs, steps that save rollback windows).
  int64_t chunked_from = 0;
  if (w.gdn_chunk_scratch.data() && !step.writes_window && step.delta_rule != DeltaRuleChoice::kRecurrent) {
    if (step.delta_rule == DeltaRuleChoice::kChunked)
      chunked_from = 1;
    else if (step.longest_seq >= kGdnChunkedMinTokens)
      chunked_from = kGdnChunkedMinTokens;
  }
  plan_attention(step);
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    const CudaLayer& layer = weights_.layers[i];
    const Fp8Rows mixer_in = input_norm(layer, T, pending);
    if (i > 0) tap(step, "layer_out", int(i) - 1, w.x.data(), H);  // the norm added the last block's output
    if (layer.kind == LayerKind::kLinearAttention) {
      gated_delta_net(layer, step.cache[i], step, mixer_in, chunked_from);
    } else {
      attention(layer, step.cache[i], step, mixer_in);
    }
    ffn(layer, T);
    pending = branch_input();
  }
  trace::OpScope final_op("final_norm", OpGroup::kNorm);
  cuda::add_rms_norm(w.normed.data(), w.x.data(), pending, weights_.final_norm.as<float>(), T, H, eps, 1.0f, act,
                     stream_);
  tap(step, "layer_out", int(weights_.layers.size()) - 1, w.x.data(), H);
  // last_index selects the rows that need logits (the last token of each sequence, or all).
  const int64_t rows = step.logit_rows;
  cuda::gather_rows(w.last_hidden.data(), w.normed.data(), step.last_index, rows, H, act, stream_);
  {
    trace::OpScope op("lm_head", OpGroup::kGemmLmHead);
    linear(weights_.lm_head, w.logits.data(), w.last_hidden.data(), rows);
  }
  trace::OpScope sampling_op("argmax", OpGroup::kSampling);
  cuda::argmax_rows(w.next_tokens.as<int32_t>(), w.logits.data(), rows, c.vocab_size, act, stream_);
}

void Qwen35CudaForward::tap(const CudaStep& step, const char* name, int layer, const void* data, int64_t cols) const {
  if (!step.tap || !*step.tap) return;
  const int64_t count = step.num_tokens * cols;
  Buffer host(DType::kF32, {step.num_tokens, cols});
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (options_.activations == DType::kF32) {
    cuda::copy_to_host(host.f32(), data, size_t(count) * sizeof(float));
  } else {
    std::vector<uint16_t> bits(static_cast<size_t>(count));
    cuda::copy_to_host(bits.data(), data, bits.size() * sizeof(uint16_t));
    for (int64_t i = 0; i < count; ++i) host.f32()[i] = bf16_to_f32(bits[size_t(i)]);
  }
  (*step.tap)(name, layer, host.view());
}

void Qwen35CudaForward::embed(const char* op, const CudaStep& step) {
  trace::OpScope scope(op, OpGroup::kEmbed);
  cuda::embedding(workspace_->x.data(), options_.activations, step.token_ids, step.num_tokens,
                  weights_.embed_tokens.data(), weights_.embed_tokens.view().dtype, config_.hidden_size, stream_);
}

Fp8Rows Qwen35CudaForward::input_norm(const CudaLayer& layer, int64_t T, cuda::Branch pending) {
  auto& w = *workspace_;
  const int64_t H = config_.hidden_size;
  const CudaLinear& first = layer.kind == LayerKind::kLinearAttention ? layer.in_proj : layer.qkv;
  const Fp8Rows mixer_in = H % 128 == 0 && fused_fp8(first) ? Fp8Rows{w.quantized.as<uint8_t>(), w.scales.as<float>()}
                                                            : Fp8Rows{};
  trace::OpScope op("input_norm", OpGroup::kNorm);
  cuda::add_rms_norm(w.normed.data(), w.x.data(), pending, layer.input_norm.as<float>(), T, H, config_.rms_norm_eps,
                     1.0f, options_.activations, stream_, const_cast<uint8_t*>(mixer_in.codes),
                     const_cast<float*>(mixer_in.scales));
  return mixer_in;
}

cuda::AttentionShape Qwen35CudaForward::attention_shape() const {
  const auto& c = config_;
  return {c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim, options_.block_size, c.rope, c.rms_norm_eps};
}

// x += branch; normed = post_attention_norm(x); branch = ffn(normed) (SwiGLU MLP or MoE).
void Qwen35CudaForward::ffn(const CudaLayer& layer, int64_t T) {
  auto& w = *workspace_;
  const auto& c = config_;
  const DType act = options_.activations;
  const int64_t H = c.hidden_size;
  const bool ffn_fp8 =
      layer.is_moe ? options_.fuse_fp8_quantization && layer.moe.format == WeightFormat::kFp8Block : fused_fp8(layer.mlp.gate_up);
  const Fp8Rows ffn_in =
      H % 128 == 0 && ffn_fp8 ? Fp8Rows{w.quantized.as<uint8_t>(), w.scales.as<float>()} : Fp8Rows{};
  {
    trace::OpScope op("post_attention_norm", OpGroup::kNorm);
    cuda::add_rms_norm(w.normed.data(), w.x.data(), branch_input(), layer.post_attention_norm.as<float>(), T, H,
                       c.rms_norm_eps, 1.0f, act, stream_, const_cast<uint8_t*>(ffn_in.codes),
                       const_cast<float*>(ffn_in.scales));
  }
  w.branch_partials.reset();  // taken: the FFN's output goes to branch
  w.branch_pairs.reset();
  if (layer.is_moe) {
    moe(layer.moe, T, ffn_in);
  } else {
    trace::OpScope mlp_op("mlp.gate_up", OpGroup::kGemmMlp);
    linear(layer.mlp.gate_up, w.projected.data(), w.normed.data(), T, ffn_in);
    const Fp8Rows down_in = fused_fp8(layer.mlp.down) && c.intermediate_size % 128 == 0
                                ? Fp8Rows{w.inner.as<uint8_t>(), w.inner_scales.as<float>()}
                                : Fp8Rows{};
    {
      // A down projection that reads the codes alone (no exact columns) leaves the act rows unwritten.
      trace::OpScope op("mlp.silu_mul", OpGroup::kElementwise);
      cuda::silu_mul(down_in.codes && layer.mlp.down.exact_count == 0 ? nullptr : w.mixer_out.data(),
                     w.projected.data(), T, c.intermediate_size, act, stream_, const_cast<uint8_t*>(down_in.codes),
                     const_cast<float*>(down_in.scales));
    }
    trace::OpScope down_op("mlp.down", OpGroup::kGemmMlp);
    project_branch(layer.mlp.down, w.mixer_out.data(), T, down_in);  // summed over ranks there
    return;
  }
  reduce_branch(T);  // the MoE combine's partial
}

// MoE FFN on normed [T, H] -> branch [T, H]: route and group the pairs by expert (on the device),
// expert GEMVs that read each routed expert's stacked weights once for all its pairs, the gated
// shared expert, weighted combine. A folded shared expert (CudaMoe::shared_folded) rides along as
// every token's pair k (expert E, weight sigmoid(router logit E)): the same launches, T * (k + 1)
// pairs, and the combine adds it last, as it adds a separate one.
void Qwen35CudaForward::moe(const CudaMoe& moe, int64_t T, const Fp8Rows& normed_codes) {
  auto& w = *workspace_;
  const auto& c = config_;
  const DType act = options_.activations;
  const bool folded = moe.shared_folded, separate = moe.has_shared && !folded;
  const int64_t H = c.hidden_size, inter = moe.intermediate, experts = moe.stacked(),
                k = c.num_experts_per_tok + (folded ? 1 : 0), pairs = T * k;
  const bool fp8 = moe.format == WeightFormat::kFp8Block;
  const MoeRouting routing =
      moe_routing_in(w.route_words.as<int32_t>(), w.route_weights.as<float>(), w.max_tokens, experts, k);
  // The shared expert is always read: one more expert than the routing's expected distinct ones.
  const double experts_read = expected_experts(T) + (folded ? 1.0 : 0.0);
  // Router logits in f32 (bf16 inputs, fp32 accumulate): rounding them to bf16 flips near-tied
  // experts, which moved bf16 logits by 15-23% on the golden MoE cases. A folded shared gate's
  // logit is row E's, f32 too (a separate gate's is act dtype).
  VT_CHECK(moe.router.format == WeightFormat::kDense && moe.router.parts.size() == 1, "MoE router must be dense");
  trace::OpScope router_op("moe.router", OpGroup::kGemmRouter);
  const int64_t router_rows = moe.router_rows();
  if (cuda::dense_gemv_supports(T, router_rows, H, act))
    cuda::dense_gemv(w.router_logits.data(), DType::kF32, w.normed.data(), moe.router.parts[0].weight.data(), T,
                     router_rows, H, act, stream_);
  else if (T <= kRouterRowsKernelMaxTokens)
    cuda::dense_gemv_rows(w.router_logits.data(), DType::kF32, w.normed.data(), moe.router.parts[0].weight.data(), T,
                          router_rows, H, act, stream_);
  else
    gemm_->matmul(w.router_logits.data(), w.normed.data(), moe.router.parts[0].weight.data(), T, router_rows, H, act,
                  stream_, DType::kF32, true);
  trace::OpScope experts_op("moe.experts", OpGroup::kMoe);
  // The experts read the normed rows as FP8 codes: fused into the norm, or quantised here.
  Fp8Rows x_codes = normed_codes;
  if (fp8 && !x_codes.codes) {
    x_codes = {w.scratch.as<uint8_t>(), w.scratch_scales.as<float>()};
    cuda::fp8_quantize_rows(w.scratch.as<uint8_t>(), w.scratch_scales.as<float>(), w.normed.data(), T, H, act, stream_);
  }
  // The gate_up GEMV routes the step first (inside its own launch at one token).
  const cuda::MoeRouter router{w.router_logits.data(), c.num_experts, c.num_experts_per_tok, c.norm_topk_prob,
                               folded, router_rows};
  cuda::moe_expert_gemv(w.expert_hidden.data(), fp8 ? static_cast<const void*>(x_codes.codes) : w.normed.data(),
                        x_codes.scales, routing, moe.gate_up.data(), moe.gate_up_scales.as<float>(), T, experts, k,
                        2 * inter, H, k, fp8, act, stream_, experts_read, {}, false, &router);
  const bool fuse_act = fp8 && options_.fuse_fp8_quantization && inter % 128 == 0;
  Fp8Rows act_codes = fuse_act ? Fp8Rows{w.inner.as<uint8_t>(), w.inner_scales.as<float>()} : Fp8Rows{};
  // The FP8 expert GEMV reads the fused codes alone: then the act rows are not written.
  cuda::silu_mul(act_codes.codes ? nullptr : w.expert_act.data(), w.expert_hidden.data(), pairs, inter, act, stream_,
                 const_cast<uint8_t*>(act_codes.codes), const_cast<float*>(act_codes.scales));
  if (fp8 && !act_codes.codes) {
    act_codes = {w.scratch.as<uint8_t>(), w.scratch_scales.as<float>()};
    cuda::fp8_quantize_rows(w.scratch.as<uint8_t>(), w.scratch_scales.as<float>(), w.expert_act.data(), pairs, inter,
                            act, stream_);
  }
  // The routing's writer (the gate_up GEMV, or the route before it) is a launch or more before the SwiGLU,
  // which waits for it before it triggers this launch: ready before the wait.
  cuda::moe_expert_gemv(w.expert_out.data(), fp8 ? static_cast<const void*>(act_codes.codes) : w.expert_act.data(),
                        act_codes.scales, routing, moe.down.data(), moe.down_scales.as<float>(), T, experts, k, H,
                        inter, 1, fp8, act, stream_, experts_read, {}, true);
  if (separate) {
    const int64_t shared = moe.shared.down.k;
    const bool shared_fp8 = options_.fuse_fp8_quantization && moe.shared.gate_up.format == WeightFormat::kFp8Block;
    linear(moe.shared.gate_up, w.projected.data(), w.normed.data(), T, shared_fp8 ? normed_codes : Fp8Rows{});
    const Fp8Rows down_in = options_.fuse_fp8_quantization && moe.shared.down.format == WeightFormat::kFp8Block && shared % 128 == 0
                                ? Fp8Rows{w.inner.as<uint8_t>(), w.inner_scales.as<float>()}
                                : Fp8Rows{};
    cuda::silu_mul(down_in.codes && moe.shared.down.exact_count == 0 ? nullptr : w.mixer_out.data(), w.projected.data(),
                   T, shared, act, stream_, const_cast<uint8_t*>(down_in.codes),
                   const_cast<float*>(down_in.scales));
    linear(moe.shared.down, w.shared_out.data(), w.mixer_out.data(), T, down_in);
    linear(moe.shared_gate, w.shared_gate.data(), w.normed.data(), T,
           options_.fuse_fp8_quantization && moe.shared_gate.format == WeightFormat::kFp8Block ? normed_codes : Fp8Rows{});
  }
  // Without a separate shared expert or a sum over ranks, the next norm combines the pairs itself
  // (the same arithmetic: one launch and one [T, H] round trip fewer per layer).
  if (!separate && !all_reduce_ && H % 128 == 0) {
    w.branch_pairs = cuda::MoePairs{w.expert_out.data(), routing.weights, k};
    return;
  }
  cuda::moe_combine(w.branch.data(), w.expert_out.data(), routing.weights, separate ? w.shared_out.data() : nullptr,
                    separate ? w.shared_gate.data() : nullptr, T, H, k, act, stream_);
}

}  // namespace vt
