// Qwen3.5 forward on CUDA, top to bottom like the diagram (the CPU reference in qwen3_5.cpp is the
// oracle this is tested against). One step runs any mix of prefill chunks and decode tokens.
#include "models/qwen3_5_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>

#include "backends/cuda/check.h"
#include "models/qwen3_5_cuda_workspace.h"
#include "profile/intent.h"
#include "core/error.h"

namespace vt {

using profile::OpGroup;

struct Qwen35CudaModel::Graphs {
  std::map<int64_t, cudaGraphExec_t> decode;  // by batch size
  ~Graphs() {
    for (auto& [batch, graph] : decode) cudaGraphExecDestroy(graph);
  }
};

namespace {

// The fewest keys one attention split takes: one batch of keys per warp of the grouped kernel.
constexpr int64_t kAttentionSplitKeys = 32;

// Sequences of a step with at least this many new tokens (a full chunk) run the chunked delta
// rule (cuda::gdn_chunked); shorter ones, decode tokens and verify steps run token by token.
constexpr int64_t kGdnChunkedMinTokens = cuda::kGdnChunk;

// with_mtp: also the MTP head's fc input [normed embedding | normed hidden], 2H wide.
int64_t widest_projection(const Qwen35Config& c, bool with_mtp) {
  return std::max({c.conv_dim() + c.linear_value_dim(), c.num_heads * c.head_dim * 2 + 2 * c.num_kv_heads * c.head_dim,
                   2 * c.intermediate_size, 2 * c.shared_expert_intermediate_size, with_mtp ? 2 * c.hidden_size : 0});
}

int64_t widest_inner(const Qwen35Config& c) {
  return std::max({c.linear_value_dim(), c.num_heads * c.head_dim, c.intermediate_size, c.moe_intermediate_size,
                   c.shared_expert_intermediate_size});
}

}  // namespace

Qwen35CudaModel::Qwen35CudaModel(Qwen35Config config, CudaWeights weights, const CudaModelOptions& options,
                                 std::string description)
    : config_(std::move(config)), weights_(std::move(weights)), options_(options),
      description_(std::move(description)) {
  VT_CHECK(options_.activations == DType::kF32 || options_.activations == DType::kBF16, "CUDA activations f32 or bf16");
  VT_CUDA_CHECK(cudaSetDevice(options_.device));
  info_.architecture = config_.architecture;
  info_.vocab_size = config_.vocab_size;
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
  graphs_ = std::make_unique<Graphs>();
  slot_used_.assign(options_.max_sequences, false);

  const DType act = options_.activations;
  const int64_t T = std::max(options_.max_step_tokens, options_.max_sequences), S = options_.max_sequences;
  const int64_t H = config_.hidden_size, logit_rows = std::max(S, options_.max_logit_rows);
  auto& w = *(workspace_ = std::make_unique<Workspace>());
  w.max_tokens = T;
  w.max_seqs = S;
  w.state_slots = S + 1;
  w.max_blocks = (options_.max_context + options_.block_size - 1) / options_.block_size;
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
  const int64_t widest_k = std::max({with_mtp ? 2 * H : H, widest_inner(config_)});
  const int64_t top_k = std::max<int64_t>(config_.num_experts_per_tok, 1);
  for (auto [codes, scales] : {std::pair{&w.quantized, &w.scales}, std::pair{&w.inner, &w.inner_scales},
                                std::pair{&w.scratch, &w.scratch_scales}}) {
    *codes = cuda::DeviceBuffer(DType::kU8, {T * top_k, widest_k});
    *scales = cuda::DeviceBuffer(DType::kF32, {T * top_k, (widest_k + 127) / 128});
  }
  if (config_.num_experts > 0) {
    const int64_t inter = config_.moe_intermediate_size, pairs = T * top_k;
    w.router_logits = cuda::DeviceBuffer(DType::kF32, {T, config_.num_experts});  // f32: top-k must not see bf16 ties
    w.route_ids = cuda::DeviceBuffer(DType::kI32, {pairs});
    w.route_weights = cuda::DeviceBuffer(DType::kF32, {pairs});
    w.expert_hidden = cuda::DeviceBuffer(act, {pairs, 2 * inter});
    w.expert_act = cuda::DeviceBuffer(act, {pairs, inter});
    w.expert_out = cuda::DeviceBuffer(act, {pairs, H});
    w.shared_out = cuda::DeviceBuffer(act, {T, H});
    w.shared_gate = cuda::DeviceBuffer(act, {T, 1});
  }
  w.last_hidden = cuda::DeviceBuffer(act, {logit_rows, H});
  w.logits = cuda::DeviceBuffer(act, {logit_rows, config_.vocab_size});
  w.next_tokens = cuda::DeviceBuffer(DType::kI32, {logit_rows});
  allocate_sampling(logit_rows);
  // metadata: token ids [T] | token_seq [T] | positions [T] | seq_start [S+1] | slots [S] | last_index [rows]
  // | window_entry [S]
  w.metadata_ints = size_t(3 * T + 3 * S + 1 + logit_rows);
  w.metadata = cuda::DeviceBuffer(DType::kI32, {int64_t(w.metadata_ints)});
  VT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&w.host_metadata), w.metadata_ints * sizeof(int32_t)));
  VT_CUDA_CHECK(cudaEventCreateWithFlags(&w.metadata_uploaded, cudaEventDisableTiming));
  if (act == DType::kBF16)
    VT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&w.host_logits),
                                 size_t(logit_rows * config_.vocab_size) * sizeof(uint16_t)));
  int32_t* base = w.metadata.as<int32_t>();
  w.token_ids = base;
  w.layout.token_seq = base + T;
  w.layout.positions = base + 2 * T;
  w.layout.seq_start = base + 3 * T;
  w.layout.slots = base + 3 * T + S + 1;
  w.last_index = base + 3 * T + 2 * S + 1;
  w.window_entry = base + 3 * T + 2 * S + 1 + logit_rows;
  w.layout.max_blocks = w.max_blocks;
  Buffer tables(DType::kI32, {w.state_slots, w.max_blocks});
  for (int64_t i = 0; i < tables.numel(); ++i) tables.view().as<int32_t>()[i] = int32_t(i);
  w.block_tables = cuda::to_device(tables);
  w.layout.block_tables = w.block_tables.as<int32_t>();

  const int64_t kv_rows = w.state_slots * w.max_blocks * options_.block_size;
  for (LayerKind kind : config_.layer_types) {
    if (kind == LayerKind::kFullAttention) {
      w.k_cache.emplace_back(act, Shape{kv_rows, config_.num_kv_heads, config_.head_dim});
      w.v_cache.emplace_back(act, Shape{kv_rows, config_.num_kv_heads, config_.head_dim});
      w.conv_state.emplace_back();
      w.recurrent.emplace_back();
    } else {
      w.k_cache.emplace_back();
      w.v_cache.emplace_back();
      w.conv_state.emplace_back(DType::kF32, Shape{w.state_slots, config_.conv_dim(), config_.linear_conv_kernel - 1});
      w.recurrent.emplace_back(DType::kF32, Shape{w.state_slots, config_.linear_num_value_heads, config_.linear_key_head_dim,
                                                  config_.linear_value_head_dim});
    }
  }
  VT_CHECK(options_.max_rollback_tokens >= 0, "max_rollback_tokens must be >= 0, got ", options_.max_rollback_tokens);
  w.window_entries = options_.max_rollback_tokens > 0 ? options_.max_rollback_tokens + 1 : 0;
  for (size_t layer = 0; layer < w.recurrent.size(); ++layer) {
    w.conv_window.emplace_back();
    w.recurrent_window.emplace_back();
    if (!w.window_entries || !w.recurrent[layer].data()) continue;
    w.conv_window.back() =
        cuda::DeviceBuffer(DType::kF32, {S, w.window_entries, config_.conv_dim(), config_.linear_conv_kernel - 1});
    w.recurrent_window.back() =
        cuda::DeviceBuffer(DType::kF32, {S * w.window_entries, config_.linear_num_value_heads,
                                         config_.linear_key_head_dim, config_.linear_value_head_dim});
  }
  if (with_mtp) {
    // The head's KV cache: slot s < S uses the blocks of block-table row s, as a sequence slot does.
    const int64_t mtp_rows = S * w.max_blocks * options_.block_size;
    w.mtp_k_cache = cuda::DeviceBuffer(act, {mtp_rows, config_.num_kv_heads, config_.head_dim});
    w.mtp_v_cache = cuda::DeviceBuffer(act, {mtp_rows, config_.num_kv_heads, config_.head_dim});
    w.mtp_output = cuda::DeviceBuffer(act, {S, H});
    mtp_slot_used_.assign(S, false);
  }
  // The chunked delta rule's scratch: for batched steps (sequences of >= kGdnChunkedMinTokens)
  // and for a forward() that asks for chunks at any length (one sequence).
  const cuda::DeltaNetShape delta_net{config_.linear_num_key_heads, config_.linear_num_value_heads,
                                      config_.linear_key_head_dim, config_.linear_value_head_dim,
                                      config_.linear_conv_kernel, config_.rms_norm_eps};
  const bool has_gdn = std::find(config_.layer_types.begin(), config_.layer_types.end(),
                                 LayerKind::kLinearAttention) != config_.layer_types.end();
  if (has_gdn && cuda::gdn_chunked_supports(delta_net))
    w.gdn_chunk_scratch = cuda::DeviceBuffer(
        DType::kF32, {std::max(cuda::gdn_chunked_scratch_floats(T, S, kGdnChunkedMinTokens, delta_net),
                               cuda::gdn_chunked_scratch_floats(T, 1, 1, delta_net))});
  setup_fp8_gemms(workspace_->max_tokens);
}

void Qwen35CudaModel::quantize_lm_head_fp8(const Fp8Quantization& quantization) {
  VT_CHECK(quantization.gpu_format(), "FP8 lm_head on the GPU: 128x128 blocks run W8A8 only (weight-only and "
           "other block shapes are the CPU reference's, for `vt eval drift`)");
  convert_lm_head_fp8(quantization.exact_columns);
  graphs_ = std::make_unique<Graphs>();  // captured graphs launch the old output layer
  setup_fp8_gemms(workspace_->max_tokens);
}

Qwen35CudaModel::~Qwen35CudaModel() {
  graphs_.reset();
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

std::unique_ptr<SequenceState> Qwen35CudaModel::new_sequence(int64_t capacity) const {
  VT_CHECK(capacity > 0 && capacity <= info_.max_positions, "sequence capacity ", capacity, " must be in [1, ",
           info_.max_positions, "]");
  auto free_slot = std::find(slot_used_.begin(), slot_used_.end(), false);
  VT_CHECK(free_slot != slot_used_.end(), "all ", slot_used_.size(), " CUDA sequence slots are in use");
  const int64_t slot = free_slot - slot_used_.begin();
  *free_slot = true;
  // A new sequence starts from zero recurrent and conv state.
  auto& w = *workspace_;
  for (size_t layer = 0; layer < w.recurrent.size(); ++layer) {
    if (!w.recurrent[layer].data()) continue;
    const size_t conv_bytes = w.conv_state[layer].bytes() / size_t(w.state_slots);
    const size_t state_bytes = w.recurrent[layer].bytes() / size_t(w.state_slots);
    VT_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(w.conv_state[layer].data()) + slot * conv_bytes, 0, conv_bytes, stream_));
    VT_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(w.recurrent[layer].data()) + slot * state_bytes, 0, state_bytes, stream_));
  }
  return std::make_unique<CudaSequence>(slot, capacity, &slot_used_);
}

void Qwen35CudaModel::upload_layout(const std::vector<int32_t>& tokens, const std::vector<int32_t>& token_seq,
                                    const std::vector<int32_t>& positions, const std::vector<int32_t>& seq_start,
                                    const std::vector<int32_t>& slots, const std::vector<int32_t>& last_index,
                                    const std::vector<int32_t>& window_entry) {
  auto& w = *workspace_;
  const int64_t T = w.max_tokens, S = w.max_seqs;
  VT_CHECK(int64_t(tokens.size()) <= T && int64_t(slots.size()) <= S, "step of ", tokens.size(), " tokens / ",
           slots.size(), " sequences exceeds the workspace (", T, " / ", S, ")");
  VT_CHECK(window_entry.size() <= slots.size(), "upload_layout: ", window_entry.size(), " window entries for ",
           slots.size(), " sequences");
  // The previous upload's copy may still be queued behind kernels (a chunked prefill enqueues
  // chunk after chunk): wait for it before rewriting the staging it reads.
  VT_CUDA_CHECK(cudaEventSynchronize(w.metadata_uploaded));
  int32_t* host_entries = w.host_metadata + (w.window_entry - w.metadata.as<int32_t>());
  std::fill(host_entries, host_entries + S, -1);
  std::copy(window_entry.begin(), window_entry.end(), host_entries);
  w.writes_window = std::any_of(window_entry.begin(), window_entry.end(), [](int32_t entry) { return entry >= 0; });
  w.longest_seq = 0;
  w.shortest_seq = seq_start.size() > 1 ? std::numeric_limits<int64_t>::max() : 0;
  for (size_t s = 0; s + 1 < seq_start.size(); ++s) {
    w.longest_seq = std::max<int64_t>(w.longest_seq, seq_start[s + 1] - seq_start[s]);
    w.shortest_seq = std::min<int64_t>(w.shortest_seq, seq_start[s + 1] - seq_start[s]);
  }
  VT_CHECK(!w.writes_window || w.window_entries > 0, "a rollback window without max_rollback_tokens");
  int32_t* host = w.host_metadata;
  std::copy(tokens.begin(), tokens.end(), host);
  std::copy(token_seq.begin(), token_seq.end(), host + T);
  std::copy(positions.begin(), positions.end(), host + 2 * T);
  std::copy(seq_start.begin(), seq_start.end(), host + 3 * T);
  std::copy(slots.begin(), slots.end(), host + 3 * T + S + 1);
  std::copy(last_index.begin(), last_index.end(), host + 3 * T + 2 * S + 1);
  w.kv_tokens = 0;
  for (int32_t position : positions) w.kv_tokens += int64_t(position) + 1;
  VT_CUDA_CHECK(cudaMemcpyAsync(w.metadata.data(), host, w.metadata_ints * sizeof(int32_t), cudaMemcpyHostToDevice,
                                stream_));
  VT_CUDA_CHECK(cudaEventRecord(w.metadata_uploaded, stream_));
}

void Qwen35CudaModel::linear(const CudaLinear& linear, void* y, const void* x, int64_t m, const Fp8Rows& fused,
                             cudaStream_t on) {
  const DType act = options_.activations;
  const size_t element = dtype_size(act);
  if (linear.format == WeightFormat::kFp8Block) {
    VT_CHECK(!on || on == stream_, "FP8 linears run on the model's stream");
    auto& w = *workspace_;
    Fp8Rows input = fused;
    if (!input.codes) {
      input = {w.scratch.as<uint8_t>(), w.scratch_scales.as<float>()};
      cuda::fp8_quantize_rows(w.scratch.as<uint8_t>(), w.scratch_scales.as<float>(), x, m, linear.k, act, stream_);
    }
    // Parts that could not merge (rows not whole 128-blocks) write their own column range.
    for (const auto& part : linear.parts) {
      const cuda::GemmBackend backend = fp8_gemm_->choose(m, part.n, linear.k, linear.n, act);
      fp8_gemm_->run(backend, static_cast<char*>(y) + part.column * element, linear.n, input.codes, input.scales,
                     part.weight.as<uint8_t>(), part.scales.as<float>(), m, part.n, linear.k, act, stream_);
    }
    if (linear.exact_count > 0)
      cuda::exact_columns_add(y, linear.n, x, linear.exact_columns.as<int32_t>(), linear.exact_weight.data(), m,
                              linear.n, linear.k, linear.exact_count, act, stream_);
    return;
  }
  VT_CHECK(linear.parts.size() == 1, "dense linear parts are always merged");
  // Narrow projections at decode (GDN b/a, the shared-expert gate): one kernel where cuBLASLt
  // runs split-K + a reduction; wide ones stay with cuBLASLt (>= 90% of bandwidth at M = 1).
  if (linear.n <= kNarrowDense && cuda::dense_gemv_supports(m, linear.n, linear.k, act)) {
    cuda::dense_gemv(y, act, x, linear.parts[0].weight.data(), m, linear.n, linear.k, act, on ? on : stream_);
    return;
  }
  // cuBLASLt's workspace is the model stream's: no other stream uses it.
  VT_CHECK(!on || on == stream_, "cuBLASLt linears run on the model's stream");
  gemm_->matmul(y, x, linear.parts[0].weight.data(), m, linear.n, linear.k, act, stream_);
}

// One step over the metadata already uploaded: num_tokens tokens from num_seqs sequences.
void Qwen35CudaModel::run_step(int64_t num_tokens, int64_t num_seqs, int64_t logit_rows) {
  auto& w = *workspace_;
  const auto& c = config_;
  const DType act = options_.activations;
  const int64_t T = num_tokens, H = c.hidden_size;
  const float eps = c.rms_norm_eps;
  {
    profile::OpScope op("embed", OpGroup::kEmbed);
    cuda::embedding(w.x.data(), act, w.token_ids, T, weights_.embed_tokens.data(), weights_.embed_tokens.view().dtype,
                    H, stream_);
  }
  cuda::Branch pending = nullptr;  // the previous block's output, added to x by the next norm
  // GDN: sequences of >= chunked_from tokens take the chunked delta rule; 0: all token by token
  // (decode steps and their graphs, steps that save rollback windows).
  int64_t chunked_from = 0;
  if (w.gdn_chunk_scratch.data() && !w.writes_window && w.delta_rule != DeltaRuleChoice::kRecurrent) {
    if (w.delta_rule == DeltaRuleChoice::kChunked)
      chunked_from = 1;
    else if (w.longest_seq >= kGdnChunkedMinTokens)
      chunked_from = kGdnChunkedMinTokens;
  }
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    const CudaLayer& layer = weights_.layers[i];
    const Fp8Rows mixer_in = input_norm(layer, T, pending);
    if (layer.kind == LayerKind::kLinearAttention) {
      gated_delta_net(layer, i, T, num_seqs, mixer_in, chunked_from);
    } else {
      attention(layer, w.k_cache[i].data(), w.v_cache[i].data(), T, num_seqs, mixer_in);
    }
    ffn(layer, T);
    pending = branch_input();
  }
  profile::OpScope final_op("final_norm", OpGroup::kNorm);
  cuda::add_rms_norm(w.normed.data(), w.x.data(), pending, weights_.final_norm.as<float>(), T, H, eps, 1.0f, act,
                     stream_);
  // last_index selects the rows that need logits (the last token of each sequence, or all).
  const int64_t rows = logit_rows;
  cuda::gather_rows(w.last_hidden.data(), w.normed.data(), w.last_index, rows, H, act, stream_);
  {
    profile::OpScope op("lm_head", OpGroup::kGemmLmHead);
    linear(weights_.lm_head, w.logits.data(), w.last_hidden.data(), rows);
  }
  profile::OpScope sampling_op("argmax", OpGroup::kSampling);
  cuda::argmax_rows(w.next_tokens.as<int32_t>(), w.logits.data(), rows, c.vocab_size, act, stream_);
}

Fp8Rows Qwen35CudaModel::input_norm(const CudaLayer& layer, int64_t T, cuda::Branch pending) {
  auto& w = *workspace_;
  const int64_t H = config_.hidden_size;
  const CudaLinear& first = layer.kind == LayerKind::kLinearAttention ? layer.in_proj : layer.qkv;
  const Fp8Rows mixer_in = H % 128 == 0 && fused_fp8(first) ? Fp8Rows{w.quantized.as<uint8_t>(), w.scales.as<float>()}
                                                            : Fp8Rows{};
  profile::OpScope op("input_norm", OpGroup::kNorm);
  cuda::add_rms_norm(w.normed.data(), w.x.data(), pending, layer.input_norm.as<float>(), T, H, config_.rms_norm_eps,
                     1.0f, options_.activations, stream_, const_cast<uint8_t*>(mixer_in.codes),
                     const_cast<float*>(mixer_in.scales));
  return mixer_in;
}

cuda::StepLayout Qwen35CudaModel::step_layout(int64_t num_tokens, int64_t num_seqs) const {
  cuda::StepLayout layout = workspace_->layout;
  layout.num_tokens = num_tokens;
  layout.num_seqs = num_seqs;
  return layout;
}

cuda::AttentionShape Qwen35CudaModel::attention_shape() const {
  const auto& c = config_;
  return {c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim, options_.block_size, c.rope_theta, c.rms_norm_eps};
}

// Gated attention: q(+gate)/k/v projection, norms + RoPE + cache writes, paged attention with the
// sigmoid gate, o_proj into branch.
void Qwen35CudaModel::attention(const CudaLayer& layer, void* k_cache, void* v_cache, int64_t T, int64_t num_seqs,
                                const Fp8Rows& mixer_in) {
  auto& w = *workspace_;
  const auto& c = config_;
  const DType act = options_.activations;
  const cuda::StepLayout layout = step_layout(T, num_seqs);
  const cuda::AttentionShape shape = attention_shape();
  // Static per (T, max_context), so a captured graph stays valid as positions grow.
  const int64_t splits = std::clamp<int64_t>(attention_blocks_ / (T * c.num_kv_heads), 1,
                                             (options_.max_context + kAttentionSplitKeys - 1) / kAttentionSplitKeys);
  const int64_t keys_per_split = (options_.max_context + splits - 1) / splits;
  {
    profile::OpScope op("attn.qkv", OpGroup::kGemmAttnQkv);
    linear(layer.qkv, w.projected.data(), w.normed.data(), T, mixer_in);
  }
  profile::OpScope attention_op("attention", OpGroup::kAttention);
  cuda::attention_prepare(w.q.as<float>(), w.gate.data(), k_cache, v_cache, w.projected.data(),
                          layer.q_norm.as<float>(), layer.k_norm.as<float>(), layout, shape, act, stream_);
  const Fp8Rows o_in = fused_fp8(layer.o_proj) && c.head_dim % 128 == 0
                           ? Fp8Rows{w.inner.as<uint8_t>(), w.inner_scales.as<float>()}
                           : Fp8Rows{};
  cuda::paged_attention(w.mixer_out.data(), w.attention_partials.as<float>(), w.q.as<float>(), w.gate.data(), k_cache,
                        v_cache, layout, shape, splits, keys_per_split, act, stream_, const_cast<uint8_t*>(o_in.codes),
                        const_cast<float*>(o_in.scales), w.kv_tokens);
  profile::OpScope out_op("attn.o_proj", OpGroup::kGemmOut);
  project_branch(layer.o_proj, w.mixer_out.data(), T, o_in);
}

void Qwen35CudaModel::project_branch(const CudaLinear& linear, const void* x, int64_t T, const Fp8Rows& fused) {
  auto& w = *workspace_;
  const DType act = options_.activations;
  w.branch_partials.reset();
  if (fp8_gemm_ && !all_reduce_ && linear.format == WeightFormat::kFp8Block && linear.parts.size() == 1 &&
      linear.exact_count == 0 && fp8_gemm_->choose_for_norm(T, linear.n, linear.k, act) == cuda::GemmBackend::kWgmmaPartials) {
    Fp8Rows input = fused;
    if (!input.codes) {
      input = {w.scratch.as<uint8_t>(), w.scratch_scales.as<float>()};
      cuda::fp8_quantize_rows(w.scratch.as<uint8_t>(), w.scratch_scales.as<float>(), x, T, linear.k, act, stream_);
    }
    const auto& part = linear.parts[0];
    w.branch_partials = fp8_gemm_->run_partials(input.codes, input.scales, part.weight.as<uint8_t>(),
                                                part.scales.as<float>(), T, linear.n, linear.k, stream_);
    return;
  }
  this->linear(linear, w.branch.data(), x, T, fused);
  reduce_branch(T);
}

cuda::Branch Qwen35CudaModel::branch_input() const {
  const auto& w = *workspace_;
  if (w.branch_partials) return &*w.branch_partials;
  return w.branch.data();
}

// x += branch; normed = post_attention_norm(x); branch = ffn(normed) (SwiGLU MLP or MoE).
void Qwen35CudaModel::ffn(const CudaLayer& layer, int64_t T) {
  auto& w = *workspace_;
  const auto& c = config_;
  const DType act = options_.activations;
  const int64_t H = c.hidden_size;
  const bool ffn_fp8 =
      layer.is_moe ? options_.fuse_fp8_quantization && layer.moe.format == WeightFormat::kFp8Block : fused_fp8(layer.mlp.gate_up);
  const Fp8Rows ffn_in =
      H % 128 == 0 && ffn_fp8 ? Fp8Rows{w.quantized.as<uint8_t>(), w.scales.as<float>()} : Fp8Rows{};
  {
    profile::OpScope op("post_attention_norm", OpGroup::kNorm);
    cuda::add_rms_norm(w.normed.data(), w.x.data(), branch_input(), layer.post_attention_norm.as<float>(), T, H,
                       c.rms_norm_eps, 1.0f, act, stream_, const_cast<uint8_t*>(ffn_in.codes),
                       const_cast<float*>(ffn_in.scales));
  }
  w.branch_partials.reset();  // taken: the FFN's output goes to branch
  if (layer.is_moe) {
    moe(layer.moe, T, ffn_in);
  } else {
    profile::OpScope mlp_op("mlp.gate_up", OpGroup::kGemmMlp);
    linear(layer.mlp.gate_up, w.projected.data(), w.normed.data(), T, ffn_in);
    const Fp8Rows down_in = fused_fp8(layer.mlp.down) && c.intermediate_size % 128 == 0
                                ? Fp8Rows{w.inner.as<uint8_t>(), w.inner_scales.as<float>()}
                                : Fp8Rows{};
    {
      profile::OpScope op("mlp.silu_mul", OpGroup::kElementwise);
      cuda::silu_mul(w.mixer_out.data(), w.projected.data(), T, c.intermediate_size, act, stream_,
                     const_cast<uint8_t*>(down_in.codes), const_cast<float*>(down_in.scales));
    }
    profile::OpScope down_op("mlp.down", OpGroup::kGemmMlp);
    project_branch(layer.mlp.down, w.mixer_out.data(), T, down_in);  // summed over ranks there
    return;
  }
  reduce_branch(T);  // the MoE combine's partial
}

void Qwen35CudaModel::set_all_reduce(DeviceAllReduce all_reduce) {
  all_reduce_ = std::move(all_reduce);
  graphs_ = std::make_unique<Graphs>();  // graphs captured before it lack the collectives
}

void Qwen35CudaModel::reduce_branch(int64_t num_tokens) {
  if (!all_reduce_) return;
  profile::OpScope op("all_reduce", OpGroup::kCollective);
  all_reduce_(workspace_->branch.data(), num_tokens * config_.hidden_size, options_.activations, stream_);
}

// MoE FFN on normed [T, H] -> branch [T, H]: route, expert GEMVs per (token, expert) pair
// straight from the stacked expert weights, the gated shared expert, weighted combine.
void Qwen35CudaModel::moe(const CudaMoe& moe, int64_t T, const Fp8Rows& normed_codes) {
  auto& w = *workspace_;
  const auto& c = config_;
  const DType act = options_.activations;
  const int64_t H = c.hidden_size, k = c.num_experts_per_tok, inter = moe.intermediate, pairs = T * k;
  const bool fp8 = moe.format == WeightFormat::kFp8Block;
  // Router logits in f32 (bf16 inputs, fp32 accumulate): rounding them to bf16 flips near-tied
  // experts, which moved bf16 logits by 15-23% on the golden MoE cases.
  VT_CHECK(moe.router.format == WeightFormat::kDense && moe.router.parts.size() == 1, "MoE router must be dense");
  profile::OpScope router_op("moe.router", OpGroup::kGemmRouter);
  if (cuda::dense_gemv_supports(T, c.num_experts, H, act))
    cuda::dense_gemv(w.router_logits.data(), DType::kF32, w.normed.data(), moe.router.parts[0].weight.data(), T,
                     c.num_experts, H, act, stream_);
  else
    gemm_->matmul(w.router_logits.data(), w.normed.data(), moe.router.parts[0].weight.data(), T, c.num_experts, H,
                  act, stream_, DType::kF32, true);
  profile::OpScope experts_op("moe.experts", OpGroup::kMoe);
  cuda::moe_route(w.route_ids.as<int32_t>(), w.route_weights.as<float>(), w.router_logits.data(), T, c.num_experts, k,
                  c.norm_topk_prob, DType::kF32, stream_);
  // The experts read the normed rows as FP8 codes: fused into the norm, or quantised here.
  Fp8Rows x_codes = normed_codes;
  if (fp8 && !x_codes.codes) {
    x_codes = {w.scratch.as<uint8_t>(), w.scratch_scales.as<float>()};
    cuda::fp8_quantize_rows(w.scratch.as<uint8_t>(), w.scratch_scales.as<float>(), w.normed.data(), T, H, act, stream_);
  }
  cuda::moe_expert_gemv(w.expert_hidden.data(), fp8 ? static_cast<const void*>(x_codes.codes) : w.normed.data(),
                        x_codes.scales, w.route_ids.as<int32_t>(), moe.gate_up.data(), moe.gate_up_scales.as<float>(),
                        pairs, 2 * inter, H, k, fp8, act, stream_);
  const bool fuse_act = fp8 && options_.fuse_fp8_quantization && inter % 128 == 0;
  Fp8Rows act_codes = fuse_act ? Fp8Rows{w.inner.as<uint8_t>(), w.inner_scales.as<float>()} : Fp8Rows{};
  cuda::silu_mul(w.expert_act.data(), w.expert_hidden.data(), pairs, inter, act, stream_,
                 const_cast<uint8_t*>(act_codes.codes), const_cast<float*>(act_codes.scales));
  if (fp8 && !act_codes.codes) {
    act_codes = {w.scratch.as<uint8_t>(), w.scratch_scales.as<float>()};
    cuda::fp8_quantize_rows(w.scratch.as<uint8_t>(), w.scratch_scales.as<float>(), w.expert_act.data(), pairs, inter,
                            act, stream_);
  }
  cuda::moe_expert_gemv(w.expert_out.data(), fp8 ? static_cast<const void*>(act_codes.codes) : w.expert_act.data(),
                        act_codes.scales, w.route_ids.as<int32_t>(), moe.down.data(), moe.down_scales.as<float>(),
                        pairs, H, inter, 1, fp8, act, stream_);
  if (moe.has_shared) {
    const int64_t shared = moe.shared.down.k;
    const bool shared_fp8 = options_.fuse_fp8_quantization && moe.shared.gate_up.format == WeightFormat::kFp8Block;
    linear(moe.shared.gate_up, w.projected.data(), w.normed.data(), T, shared_fp8 ? normed_codes : Fp8Rows{});
    const Fp8Rows down_in = options_.fuse_fp8_quantization && moe.shared.down.format == WeightFormat::kFp8Block && shared % 128 == 0
                                ? Fp8Rows{w.inner.as<uint8_t>(), w.inner_scales.as<float>()}
                                : Fp8Rows{};
    cuda::silu_mul(w.mixer_out.data(), w.projected.data(), T, shared, act, stream_, const_cast<uint8_t*>(down_in.codes),
                   const_cast<float*>(down_in.scales));
    linear(moe.shared.down, w.shared_out.data(), w.mixer_out.data(), T, down_in);
    linear(moe.shared_gate, w.shared_gate.data(), w.normed.data(), T,
           options_.fuse_fp8_quantization && moe.shared_gate.format == WeightFormat::kFp8Block ? normed_codes : Fp8Rows{});
  }
  cuda::moe_combine(w.branch.data(), w.expert_out.data(), w.route_weights.as<float>(),
                    moe.has_shared ? w.shared_out.data() : nullptr, moe.has_shared ? w.shared_gate.data() : nullptr, T,
                    H, k, act, stream_);
}

void Qwen35CudaModel::forward(std::span<const int32_t> tokens, SequenceState& base_state, const TensorView& logits,
                              const ForwardOptions& options) {
  auto& state = dynamic_cast<CudaSequence&>(base_state);
  auto& w = *workspace_;
  const int64_t total = int64_t(tokens.size()), vocab = config_.vocab_size;
  VT_CHECK(total > 0, "forward: no tokens");
  VT_CHECK(options.delta_rule != DeltaRuleChoice::kChunked || !options.keep_rollback,
           "CUDA forward: the chunked delta rule keeps no per-token states for a rollback window");
  VT_CHECK(options.delta_rule != DeltaRuleChoice::kChunked || w.gdn_chunk_scratch.data(),
           "CUDA forward: the chunked delta rule does not take these head dims");
  VT_CHECK(state.length() + total <= state.capacity(), "forward: ", state.length(), " + ", total,
           " tokens exceed the sequence capacity ", state.capacity());
  const int64_t logit_rows = options.all_logits ? total : 1;
  VT_CHECK(logits.dtype == DType::kF32 && logits.device == Device::kCpu && logits.shape == Shape({logit_rows, vocab}),
           "forward: logits must be host f32 [", logit_rows, ", ", vocab, "]");
  check_window(state, total, options.keep_rollback);
  if (options.keep_hidden) check_sequence_hidden(state, total);
  prepare_window(state, options.keep_rollback);
  // The delta rule asked for holds for this forward's steps only.
  struct DeltaRuleScope {
    DeltaRuleChoice& choice;
    ~DeltaRuleScope() { choice = DeltaRuleChoice::kAuto; }
  } delta_rule_scope{w.delta_rule};
  w.delta_rule = options.delta_rule;
  // The MTP drafter's hidden states: every position's final-norm output, chunk after chunk, kept
  // in the sequence (keep_hidden) or else, with keeping on, for the model's last forward.
  const bool keep_hidden = keep_hidden_states_ && !options.keep_hidden;
  kept_positions_ = keep_hidden ? PositionRange{state.length(), total} : PositionRange{};
  std::vector<cuda::CopySpan> sequence_spans;
  const size_t hidden_row_bytes = size_t(config_.hidden_size) * dtype_size(options_.activations);
  // Chunks of at most max_step_tokens (and of the logit rows the workspace holds).
  const int64_t chunk_limit = options.all_logits ? std::min(w.max_tokens, int64_t(w.logits.shape()[0])) : w.max_tokens;
  for (int64_t begin = 0; begin < total; begin += chunk_limit) {
    const int64_t count = std::min(chunk_limit, total - begin);
    const bool last_chunk = begin + count == total;
    std::vector<int32_t> ids(tokens.begin() + begin, tokens.begin() + begin + count);
    std::vector<int32_t> token_seq(count, 0), positions(count), seq_start = {0, int32_t(count)};
    for (int64_t t = 0; t < count; ++t) positions[t] = int32_t(state.length() + t);
    std::vector<int32_t> slots = {int32_t(state.slot())}, last_index;
    if (options.all_logits) {
      for (int64_t t = 0; t < count; ++t) last_index.push_back(int32_t(t));
    } else {
      last_index.push_back(int32_t(count - 1));
    }
    std::vector<int32_t> window_entry;
    if (options.keep_rollback) window_entry.push_back(int32_t(state.length() - state.rollback_floor() + 1));
    upload_layout(ids, token_seq, positions, seq_start, slots, last_index, window_entry);
    const int64_t rows = int64_t(last_index.size());
    run_step(count, 1, rows);
    if (keep_hidden)
      VT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(w.kept_hidden.data()) + size_t(begin) * hidden_row_bytes,
                                    w.normed.data(), size_t(count) * hidden_row_bytes, cudaMemcpyDeviceToDevice,
                                    stream_));
    if (options.keep_hidden) {
      sequence_spans.clear();
      keep_sequence_hidden(state, 0, count, sequence_spans);
      profile::OpScope op("mtp.keep_hidden", OpGroup::kOther);
      cuda::copy_spans(sequence_spans.data(), int64_t(sequence_spans.size()), stream_);
    }
    state.advance(count);
    if (!options.all_logits && !last_chunk) continue;
    copy_logits_to_host(logits.f32() + (options.all_logits ? begin * vocab : 0), rows);
  }
}

const void* Qwen35CudaModel::device_logits() const { return workspace_->logits.data(); }
const int32_t* Qwen35CudaModel::device_next_tokens() const { return workspace_->next_tokens.as<int32_t>(); }

void Qwen35CudaModel::copy_logits_to_host(float* destination, int64_t rows) {
  const std::pair<int64_t, int64_t> all[] = {{0, rows}};
  copy_logit_rows_to_host(destination, all);
}

void Qwen35CudaModel::copy_logit_rows_to_host(float* destination,
                                              std::span<const std::pair<int64_t, int64_t>> ranges) {
  const auto& w = *workspace_;
  if (!emit_logits_) ranges = {};
  const int64_t vocab = config_.vocab_size;
  const bool f32 = options_.activations == DType::kF32;
  for (const auto& [first, count] : ranges) {
    if (count <= 0) continue;
    const size_t offset = size_t(first * vocab), elements = size_t(count * vocab);
    if (f32) {
      VT_CUDA_CHECK(cudaMemcpyAsync(destination + offset, w.logits.as<float>() + offset, elements * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream_));
    } else {
      VT_CUDA_CHECK(cudaMemcpyAsync(w.host_logits + offset, w.logits.as<uint16_t>() + offset, elements * 2,
                                    cudaMemcpyDeviceToHost, stream_));
    }
  }
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (f32) return;
  for (const auto& [first, count] : ranges)
    for (int64_t i = first * vocab; i < (first + count) * vocab; ++i) destination[i] = bf16_to_f32(w.host_logits[i]);
}

void Qwen35CudaModel::launch_decode_graph(int64_t batch, const std::function<void()>& upload) {
  auto it = graphs_->decode.find(batch);
  if (it == graphs_->decode.end()) {
    // Warm-up outside capture (cuBLASLt plans, lazy module loads) with every sequence mapped to
    // the scratch slot: live states advance only in the graph launch below. The scratch slot's
    // contents are garbage by design (several sequences write it at once).
    auto& w = *workspace_;
    upload();
    std::vector<int32_t> scratch(size_t(batch), int32_t(w.state_slots - 1));
    VT_CUDA_CHECK(cudaMemcpyAsync(const_cast<int32_t*>(w.layout.slots), scratch.data(), scratch.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
    run_step(batch, batch, batch);
    VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraph_t graph;
    VT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    run_step(batch, batch, batch);
    VT_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec;
    VT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    it = graphs_->decode.emplace(batch, exec).first;
  }
  upload();
  VT_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
}

void Qwen35CudaModel::forward_batch(std::span<const BatchItem> items, const TensorView& logits) {
  const int64_t rows = batch_logit_rows(items), vocab = config_.vocab_size;
  VT_CHECK(logits.dtype == DType::kF32 && logits.device == Device::kCpu && logits.shape == Shape({rows, vocab}),
           "forward_batch: logits must be host f32 [", rows, ", ", vocab, "]");
  copy_logits_to_host(logits.f32(), run_batch(items, false));
}

void Qwen35CudaModel::verify_greedy(std::span<const BatchItem> items, std::vector<int32_t>* next_tokens) {
  const int64_t rows = run_batch(items, true);
  next_tokens->resize(size_t(rows));
  VT_CUDA_CHECK(cudaMemcpyAsync(next_tokens->data(), workspace_->next_tokens.data(), size_t(rows) * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream_));
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

int64_t Qwen35CudaModel::run_batch(std::span<const BatchItem> items, bool all_rows) {
  auto& w = *workspace_;
  kept_positions_ = {};  // batched steps keep none for the last forward (forward() does), only per sequence
  const int64_t count = int64_t(items.size());
  VT_CHECK(count > 0 && count <= w.max_seqs && count <= int64_t(w.logits.shape()[0]), "forward_batch: ", count,
           " sequences (at most ", w.max_seqs, ")");
  std::vector<int32_t> ids, token_seq, positions, seq_start = {0}, slots, last_index, window_entry;
  bool all_decode = true, keeps_rollback = false, keeps_hidden = false;
  for (int64_t i = 0; i < count; ++i) {
    auto& state = dynamic_cast<CudaSequence&>(*items[size_t(i)].state);
    const auto& tokens = items[size_t(i)].tokens;
    VT_CHECK(!tokens.empty(), "forward_batch: sequence ", i, " has no tokens");
    VT_CHECK(state.length() + int64_t(tokens.size()) <= state.capacity(), "forward_batch: sequence ", i, ": ",
             state.length(), " + ", tokens.size(), " tokens exceed its capacity ", state.capacity());
    check_window(state, int64_t(tokens.size()), items[size_t(i)].keep_rollback);
    if (items[size_t(i)].keep_hidden) check_sequence_hidden(state, int64_t(tokens.size()));
    keeps_hidden = keeps_hidden || items[size_t(i)].keep_hidden;
    all_decode = all_decode && tokens.size() == 1;
    keeps_rollback = keeps_rollback || items[size_t(i)].keep_rollback;
    const bool item_rows = all_rows || items[size_t(i)].all_logits;  // a row per token, else the last
    for (size_t t = 0; t < tokens.size(); ++t) {
      ids.push_back(tokens[t]);
      token_seq.push_back(int32_t(i));
      positions.push_back(int32_t(state.length() + int64_t(t)));
      if (item_rows) last_index.push_back(int32_t(ids.size() - 1));
    }
    seq_start.push_back(int32_t(ids.size()));
    slots.push_back(int32_t(state.slot()));
    if (!item_rows) last_index.push_back(int32_t(ids.size() - 1));
  }
  VT_CHECK(int64_t(ids.size()) <= w.max_tokens, "forward_batch: ", ids.size(), " tokens exceed the step's ",
           w.max_tokens);
  const int64_t rows = int64_t(last_index.size());
  VT_CHECK(rows <= int64_t(w.logits.shape()[0]), "verify: logits for ", rows, " tokens exceed the ",
           w.logits.shape()[0], " rows one step holds (CudaModelOptions::max_logit_rows)");
  // Every check passed: open or close the windows (entry 0 snapshots the live state).
  for (const BatchItem& item : items) {
    auto& state = dynamic_cast<CudaSequence&>(*item.state);
    prepare_window(state, item.keep_rollback);
    window_entry.push_back(item.keep_rollback ? int32_t(state.length() - state.rollback_floor() + 1) : -1);
  }
  const auto upload = [&] {
    upload_layout(ids, token_seq, positions, seq_start, slots, last_index, window_entry);
  };
  // Decode graphs are captured without windows and with one logit row per sequence (an
  // all_logits item of one token has one row too).
  if (all_decode && !keeps_rollback && !all_rows) {
    launch_decode_graph(count, upload);
  } else {
    upload();
    run_step(int64_t(ids.size()), count, rows);
  }
  if (keeps_hidden) {
    // Each keep_hidden item's rows of the final norm's output, normed [seq_start[i], seq_start[i + 1]),
    // into its sequence's ring: one launch, queued after the step (or its graph).
    std::vector<cuda::CopySpan> spans;
    for (int64_t i = 0; i < count; ++i)
      if (items[size_t(i)].keep_hidden)
        keep_sequence_hidden(*items[size_t(i)].state, seq_start[size_t(i)], seq_start[size_t(i) + 1] - seq_start[size_t(i)],
                             spans);
    profile::OpScope op("mtp.keep_hidden", OpGroup::kOther);
    cuda::copy_spans(spans.data(), int64_t(spans.size()), stream_);
  }
  for (const auto& item : items) dynamic_cast<CudaSequence&>(*item.state).advance(int64_t(item.tokens.size()));
  return rows;
}

void Qwen35CudaModel::check_window(const SequenceState& base_state, int64_t tokens, bool keep_rollback) const {
  if (!keep_rollback) return;
  const auto& state = dynamic_cast<const CudaSequence&>(base_state);
  VT_CHECK(supports_rollback(), "keep_rollback: this CUDA model keeps no rollback window (build it with "
           "CudaModelOptions::max_rollback_tokens > 0)");
  const int64_t floor = state.window_open() ? state.rollback_floor() : state.length();
  VT_CHECK(state.length() + tokens - floor <= options_.max_rollback_tokens, "keep_rollback: a rollback window of ",
           state.length() + tokens - floor, " tokens (from length ", floor, ") exceeds max_rollback_tokens ",
           options_.max_rollback_tokens);
}

void Qwen35CudaModel::prepare_window(SequenceState& base_state, bool keep_rollback) {
  auto& state = dynamic_cast<CudaSequence&>(base_state);
  if (!keep_rollback) {
    if (state.window_open()) state.close_window();
    return;
  }
  if (state.window_open()) return;
  copy_window_entry(state.slot(), 0, true);
  state.open_window();
}

void Qwen35CudaModel::copy_window_entry(int64_t slot, int64_t entry, bool into_window) {
  auto& w = *workspace_;
  VT_CHECK(slot >= 0 && slot < w.max_seqs && entry >= 0 && entry < w.window_entries, "rollback window: slot ", slot,
           " entry ", entry, " outside ", w.max_seqs, " x ", w.window_entries);
  std::vector<cuda::CopySpan> spans;
  for (size_t layer = 0; layer < w.recurrent.size(); ++layer) {
    if (!w.recurrent_window[layer].data()) continue;
    for (auto [live, window] : {std::pair{&w.recurrent[layer], &w.recurrent_window[layer]},
                                std::pair{&w.conv_state[layer], &w.conv_window[layer]}}) {
      const int64_t count = live->shape().numel() / w.state_slots;
      float* state = live->as<float>() + slot * count;
      float* saved = window->as<float>() + (slot * w.window_entries + entry) * count;
      spans.push_back(into_window ? cuda::CopySpan{saved, state, count} : cuda::CopySpan{state, saved, count});
    }
  }
  profile::OpScope op(into_window ? "gdn.window_open" : "gdn.rollback", OpGroup::kGdn);
  cuda::copy_spans(spans.data(), int64_t(spans.size()), stream_);
}

void Qwen35CudaModel::rollback(SequenceState& base_state, int64_t length) {
  auto& state = dynamic_cast<CudaSequence&>(base_state);
  VT_CHECK(supports_rollback(), "rollback: this CUDA model keeps no rollback window (build it with "
           "CudaModelOptions::max_rollback_tokens > 0)");
  check_rollback(state, length);
  if (length == state.length()) return;
  // Attention needs nothing: its KV rows past `length` are rewritten before any position reads them.
  copy_window_entry(state.slot(), length - state.rollback_floor(), false);
  state.set_length(length);
}

void Qwen35CudaModel::commit(SequenceState& base_state) {
  VT_CHECK(supports_rollback(), "commit: this CUDA model keeps no rollback window (build it with "
           "CudaModelOptions::max_rollback_tokens > 0)");
  dynamic_cast<CudaSequence&>(base_state).close_window();
}

void Qwen35CudaModel::decode_step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                                  std::vector<int32_t>* next_tokens, bool use_graph) {
  const int64_t batch = int64_t(tokens.size());
  VT_CHECK(batch > 0 && batch <= workspace_->max_seqs && positions.size() == tokens.size(), "decode_step: batch ",
           batch, " (max ", workspace_->max_seqs, ")");
  for (int32_t position : positions)
    VT_CHECK(position >= 0 && position < options_.max_context, "decode_step: position ", position, " beyond ",
             options_.max_context);
  kept_positions_ = {};
  std::vector<int32_t> token_seq(batch), seq_start(batch + 1), slots(batch), last_index(batch);
  for (int64_t i = 0; i < batch; ++i) token_seq[i] = slots[i] = last_index[i] = seq_start[i] = int32_t(i);
  seq_start[batch] = int32_t(batch);
  const auto upload = [&] { upload_layout(tokens, token_seq, positions, seq_start, slots, last_index); };
  if (!use_graph) {
    upload();
    run_step(batch, batch, batch);
  } else {
    launch_decode_graph(batch, upload);
  }
  if (next_tokens) {
    next_tokens->resize(batch);
    VT_CUDA_CHECK(cudaMemcpyAsync(next_tokens->data(), workspace_->next_tokens.data(), batch * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, stream_));
  }
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::vector<float> Qwen35CudaModel::last_logits(int64_t rows) {
  VT_CHECK(rows > 0 && rows <= workspace_->logits.shape()[0], "last_logits: ", rows, " rows");
  std::vector<float> host(size_t(rows * config_.vocab_size));
  copy_logits_to_host(host.data(), rows);
  return host;
}

void Qwen35CudaModel::randomize_state(uint64_t seed) {
  auto& w = *workspace_;
  for (size_t layer = 0; layer < w.k_cache.size(); ++layer) {
    for (auto* buffer : {&w.k_cache[layer], &w.v_cache[layer]})
      if (buffer->data()) cuda::fill_random(buffer->data(), buffer->view().dtype, buffer->shape().numel(), ++seed, 1.0f, 0.0f, stream_);
    if (w.recurrent[layer].data()) {
      cuda::fill_random(w.recurrent[layer].data(), DType::kF32, w.recurrent[layer].shape().numel(), ++seed, 0.05f, 0.0f, stream_);
      cuda::fill_random(w.conv_state[layer].data(), DType::kF32, w.conv_state[layer].shape().numel(), ++seed, 1.0f, 0.0f, stream_);
    }
  }
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace vt
