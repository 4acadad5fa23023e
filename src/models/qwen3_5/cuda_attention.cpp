// The gated attention mixer of one layer (Qwen35CudaForward::attention): the q(+gate)/k/v
// projection, norms + RoPE + cache writes, causal attention with the sigmoid gate, o_proj into
// branch. A step's sequences with many new tokens (prefill chunks) run on FlashInfer's sm90 prefill
// kernel (cuda::prefill_attention), the others' tokens (decodes, verifies, short chunks) on the
// flash-decoding kernels (cuda::paged_attention).
#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "cuda/check.h"
#include "models/qwen3_5/cuda_model.h"
#include "models/qwen3_5/cuda_workspace.h"
#include "ops/attention/attention.h"
#include "ops/attention/prefill_plan.h"
#include "ops/step_layout.h"
#include "trace/intent.h"

namespace vt {

using trace::OpGroup;

namespace {

// The fewest keys one attention split takes: one batch of keys per warp of the grouped kernel.
constexpr int64_t kAttentionSplitKeys = 32;

// Sequences of a step with at least this many new tokens run on the prefill kernel. Its work item
// is a 128-query tile per query head, so shorter ones waste tile rows, but from here on the
// flash-decoding kernels' per-token reads of the keys cost more: 16 tokens at 30K keys read
// ~2 GB of K/V there (27B), against one tile's pass per head.
constexpr int64_t kPrefillAttentionMinTokens = 16;

}  // namespace

void Qwen35CudaForward::setup_prefill_attention() {
  auto& w = *workspace_;
  const auto& c = config_;
  w.paged_runs.reserve(size_t(w.max_seqs));
  const bool has_attention = std::find(c.layer_types.begin(), c.layer_types.end(),
                                       LayerKind::kFullAttention) != c.layer_types.end();
  if (!options_.prefill_attention || options_.batch_invariant || !has_attention ||
      !cuda::prefill_attention_supports(attention_shape(), options_.activations))
    return;
  w.q_act = cuda::DeviceBuffer(options_.activations, {w.max_tokens, c.num_heads * c.head_dim});
  w.prefill_plan = std::make_unique<cuda::PrefillAttentionPlan>(
      c.num_heads, cuda::prefill_attention_ctas(), w.max_tokens, w.max_seqs);
  w.prefill_plan_device =
      cuda::DeviceBuffer(DType::kI32, {int64_t(w.prefill_plan->packed().size())});
  w.prefill_sequences.reserve(size_t(w.max_seqs));
}

void Qwen35CudaForward::plan_attention(const CudaStep& step) {
  auto& w = *workspace_;
  w.paged_runs.clear();
  w.prefill_sequences.clear();
  if (!w.prefill_plan || step.longest_seq < kPrefillAttentionMinTokens) {
    // Decode steps (and their CUDA graphs): every token on paged_attention, as one launch.
    w.paged_runs.push_back({0, step.num_tokens, step.kv_tokens});
    if (w.prefill_plan) w.prefill_plan->plan(nullptr, 0, step.layout.max_blocks);
    return;
  }
  const cuda::StepLayout& host = step.host_layout;
  for (int64_t s = 0; s < step.num_seqs; ++s) {
    const int32_t first = host.seq_start[s], count = host.seq_start[s + 1] - first;
    const int32_t keys = host.positions[first + count - 1] + 1;
    if (count >= kPrefillAttentionMinTokens) {
      w.prefill_sequences.push_back({first, count, keys, host.slots[s]});
      continue;
    }
    const int64_t kv_tokens = int64_t(count) * (keys - count) + int64_t(count) * (count + 1) / 2;
    if (!w.paged_runs.empty() && w.paged_runs.back().first + w.paged_runs.back().count == first) {
      w.paged_runs.back().count += count;
      w.paged_runs.back().kv_tokens += kv_tokens;
    } else {
      w.paged_runs.push_back({first, count, kv_tokens});
    }
  }
  cuda::PrefillAttentionPlan& plan = *w.prefill_plan;
  plan.plan(w.prefill_sequences.data(), int64_t(w.prefill_sequences.size()),
            step.layout.max_blocks);
  // From pageable memory: staged before the call returns, so the next step may re-plan at once.
  VT_CUDA_CHECK(cudaMemcpyAsync(w.prefill_plan_device.data(), plan.packed().data(),
                                plan.packed().size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                stream_));
}

// Gated attention: q(+gate)/k/v projection, norms + RoPE + cache writes, attention with the
// sigmoid gate (prefill_attention for the planned sequences, paged_attention for the runs of the
// other tokens), o_proj into branch.
void Qwen35CudaForward::attention(const CudaLayer& layer, const LayerCache& cache,
                                  const CudaStep& step, const Fp8Rows& mixer_in) {
  auto& w = *workspace_;
  const auto& c = config_;
  const DType act = options_.activations;
  const int64_t T = step.num_tokens, row = c.num_heads * c.head_dim;
  const cuda::StepLayout& layout = step.layout;
  void* k_cache = cache.k;
  void* v_cache = cache.v;
  const cuda::AttentionShape shape = attention_shape();
  const bool prefill = w.prefill_plan && w.prefill_plan->works() > 0;
  {
    trace::OpScope op("attn.qkv", OpGroup::kGemmAttnQkv);
    linear(layer.qkv, w.projected.data(), w.normed.data(), T, mixer_in);
  }
  trace::OpScope attention_op("attention", OpGroup::kAttention);
  cuda::attention_prepare(w.paged_runs.empty() ? nullptr : w.q.as<float>(), w.gate.data(), k_cache,
                          v_cache, w.projected.data(), layer.q_norm.as<float>(),
                          layer.k_norm.as<float>(), layout, shape, act, stream_,
                          prefill ? w.q_act.data() : nullptr);
  const Fp8Rows o_in = fused_fp8(layer.o_proj) && c.head_dim % 128 == 0
                           ? Fp8Rows{w.inner.as<uint8_t>(), w.inner_scales.as<float>()}
                           : Fp8Rows{};
  uint8_t* o_codes = const_cast<uint8_t*>(o_in.codes);
  float* o_scales = const_cast<float*>(o_in.scales);
  // The kernel's output goes straight into mixer_out, the gate applied there in place.
  if (prefill)
    cuda::prefill_attention(w.mixer_out.data(), w.mixer_out.data(), w.q_act.data(), w.gate.data(),
                            k_cache, v_cache, layout, *w.prefill_plan,
                            w.prefill_plan_device.as<int32_t>(), shape, stream_, o_codes, o_scales);
  const size_t element = dtype_size(act);
  // Batch-invariant: a token's sum depends on its key splits, so they come from the model and the
  // GPU alone (not the step's tokens, not --max-context: `vt generate` sizes its context to the
  // request), the tokens in pieces of as many as the partials buffer holds at that split.
  const bool invariant = options_.batch_invariant;
  const int64_t context = invariant ? c.max_position_embeddings : options_.max_context;
  const int64_t most_splits = (context + kAttentionSplitKeys - 1) / kAttentionSplitKeys;
  for (const auto& run : w.paged_runs) {
    // Static per (tokens, max_context), so a captured graph stays valid as positions grow.
    const int64_t splits =
        std::clamp<int64_t>(attention_blocks_ / ((invariant ? 1 : run.count) * c.num_kv_heads), 1, most_splits);
    const int64_t keys_per_split = (context + splits - 1) / splits;
    const int64_t piece = invariant ? std::max<int64_t>(1, attention_blocks_ / (splits * c.num_kv_heads)) : run.count;
    for (int64_t first = run.first; first < run.first + run.count; first += piece) {
      const int64_t count = std::min(piece, run.first + run.count - first);
      // The piece's tokens as a step of their own: its rows of every per-token array.
      cuda::StepLayout run_layout = layout;
      run_layout.token_seq += first;
      run_layout.positions += first;
      run_layout.num_tokens = count;
      const size_t offset = size_t(first * row);
      cuda::paged_attention(static_cast<char*>(w.mixer_out.data()) + offset * element,
                            w.attention_partials.as<float>(), w.q.as<float>() + offset,
                            static_cast<const char*>(w.gate.data()) + offset * element, k_cache, v_cache,
                            run_layout, shape, splits, keys_per_split, act, stream_,
                            o_codes ? o_codes + offset : nullptr, o_scales ? o_scales + offset / 128 : nullptr,
                            run.kv_tokens * count / std::max<int64_t>(run.count, 1));
    }
  }
  trace::OpScope out_op("attn.o_proj", OpGroup::kGemmOut);
  project_branch(layer.o_proj, w.mixer_out.data(), T, o_in);
}

}  // namespace vt
