// The CUDA forward's activations: buffers for the widest step, allocated once at construction
// (cuda_model.cpp). Internal to the model's source files (cuda_*.cpp).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "cuda/device_buffer.h"
#include "models/qwen3_5/cuda_model.h"
#include "ops/moe/moe.h"
#include "ops/attention/prefill_plan.h"
#include "ops/gemm/partials.h"

namespace vt {

struct Qwen35CudaForward::Workspace {
  int64_t max_tokens = 0, max_seqs = 0;
  cuda::DeviceBuffer x, normed, branch;   // [T, H] act: residual stream, norm output, block output
  // The block output as an FP8 GEMM's partials instead of in `branch` (project_branch), when set.
  std::optional<cuda::GemmPartials> branch_partials;
  // A MoE layer's output left as its pairs, which the next norm combines (cuda::MoePairs).
  std::optional<cuda::MoePairs> branch_pairs;
  cuda::DeviceBuffer projected;           // [T, widest projection] act
  cuda::DeviceBuffer ba;                  // [T, 2*Hv] act
  cuda::DeviceBuffer conv_out;            // [T, conv_dim] f32
  cuda::DeviceBuffer mixer_out;           // [T, widest mixer/MLP inner width] act
  cuda::DeviceBuffer q, gate;             // [T, Hq*D] f32 / act
  cuda::DeviceBuffer attention_partials;  // split-key attention partials, f32
  // Prefill attention (where cuda::prefill_attention serves the model): q [T, Hq*D] act, the
  // step's plan on the host and on the device (plan_attention), and the step's tokens that stay
  // on paged_attention, as runs of adjacent tokens (all of them where there is no plan).
  cuda::DeviceBuffer q_act;
  std::unique_ptr<cuda::PrefillAttentionPlan> prefill_plan;
  cuda::DeviceBuffer prefill_plan_device;
  std::vector<cuda::PrefillSequence> prefill_sequences;  // reserved: max_seqs
  struct TokenRun {
    int64_t first, count, kv_tokens;  // kv_tokens: the keys its tokens see in all
  };
  std::vector<TokenRun> paged_runs;  // reserved: max_seqs
  // MoE, with E' = E + 1 and k' = k + 1 where a shared expert is folded in (else E and k): router
  // logits [T, E'] f32, the routing (route_words: ids and the expert-grouped layout, i32;
  // route_weights [T*k'] f32; moe_routing_in(.., max_tokens, E', k') lays a routing out in them),
  // per-pair expert activations [T*k', 2I] / [T*k', I] / [T*k', H]; a separate shared expert's
  // output [T, H] and gate [T, 1] (unallocated when every shared expert is folded).
  cuda::DeviceBuffer router_logits, route_words, route_weights, expert_hidden, expert_act, expert_out;
  cuda::DeviceBuffer shared_out, shared_gate;
  // FP8 activations [rows, widest K] e4m3 and [rows, K/128] scales: `quantized` holds a norm's
  // output (fused into the norm; read by every linear of the block), `inner` a mixer's or
  // SwiGLU's output (fused into gdn_recurrent / attention combine / silu_mul), `scratch` what a
  // linear quantises itself when nothing upstream did.
  cuda::DeviceBuffer quantized, scales, inner, inner_scales, scratch, scratch_scales;
  cuda::DeviceBuffer last_hidden, logits;  // [rows, H], [rows, V] act
  cuda::DeviceBuffer next_tokens;          // [rows] i32
  // Chunked GDN prefill (cuda::gdn_chunked; none for head dims it does not take): scratch for the
  // widest step.
  cuda::DeviceBuffer gdn_chunk_scratch;
};

}  // namespace vt
