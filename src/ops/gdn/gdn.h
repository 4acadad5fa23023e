// Gated DeltaNet: the conv and the delta rule on the CPU (recurrent and chunked, the reference),
// the conv, the recurrent kernel and the chunked prefill kernels on CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/stream.h"
#include "ops/step_layout.h"

namespace vt::cpu {

// Depthwise causal conv1d (no bias) + SiLU over T steps with a rolling state.
// x[T, C]; weight[C, K]; state[C, K-1] holds the previous K-1 inputs (oldest first), updated.
void causal_conv1d_silu(float* out, const float* x, float* state, const float* weight,
                        int64_t num_tokens, int64_t channels, int64_t kernel);

// Gated delta rule, per value head h (key head h / (Hv/Hk)). q, k [T, Hk, dk] already
// L2-normalised, q scaled by dk^-0.5; v [T, Hv, dv]; g, beta [T, Hv]; state [Hv, dk, dv] (fp32,
// updated in place); out [T, Hv, dv].
void gated_delta_rule_recurrent(float* out, const float* q, const float* k, const float* v,
                                const float* g, const float* beta, float* state, int64_t num_tokens,
                                int64_t num_k_heads, int64_t num_v_heads, int64_t dk, int64_t dv);

// Same function computed in chunks (WY / UT-transform form, as HF's torch_chunk_gated_delta_rule).
void gated_delta_rule_chunked(float* out, const float* q, const float* k, const float* v,
                              const float* g, const float* beta, float* state, int64_t num_tokens,
                              int64_t num_k_heads, int64_t num_v_heads, int64_t dk, int64_t dv,
                              int64_t chunk_size);

}  // namespace vt::cpu

namespace vt::cuda {

struct DeltaNetShape {
  int64_t num_k_heads, num_v_heads, k_dim, v_dim, conv_kernel;
  float eps;  // gated norm eps
};

// The rollback window of speculative verification, for one GDN state (conv or recurrent): per
// state slot `entries` copies of the state, [slots, entries, <state>] f32. A sequence whose
// first_entry[seq] (device, [S]) is >= 0 also writes its state after each of its tokens of the
// step into entries first_entry[seq], first_entry[seq] + 1, ... No states: no window (decode).
struct GdnWindow {
  float* states = nullptr;
  const int32_t* first_entry = nullptr;
  int64_t entries = 0;
};

// Causal depthwise conv1d + SiLU over each sequence's tokens with the rolling state
// conv_state [slots, conv_dim, K-1] f32: mixed [T, conv_dim] (column block of `projected`, row
// stride `projected_stride`) -> conv_out [T, conv_dim] f32. Two schedules, the same bits:
// kChannels, one thread per (sequence, channel) walking its tokens (decode, rollback windows);
// kTokens, the tokens in parallel and the state after them (prefill: a 2,048-token sequence
// walked token by token waits on 2,048 loads in a row; K = 4 only, no window). kAuto: kTokens for
// window-less steps with more tokens than sequences and K = 4, else kChannels.
enum class ConvSchedule { kAuto, kChannels, kTokens };
void gdn_conv(float* conv_out, float* conv_state, const void* projected, int64_t projected_stride,
              const float* conv_weight, const StepLayout& layout, const DeltaNetShape& shape, DType act,
              cudaStream_t stream, const GdnWindow& window = {}, ConvSchedule schedule = ConvSchedule::kAuto);

// The Gated DeltaNet core's inputs and outputs, the same for the recurrent and the chunked kernels:
// conv_out [T, conv_dim] f32; z: column block z_offset of `projected` [T, projected_stride] act;
// ba [T, 2*Hv] act ([b | a]); recurrent [slots, Hv, dk, dv] f32, updated; out [T, Hv*dv] act.
// With q_codes set (dv == 128), also out's FP8 quantisation for the out_proj ([T, Hv*dv] e4m3,
// [T, Hv] scales).
struct GdnArgs {
  void* out;
  float* recurrent;
  const float* conv_out;
  const void* projected;
  int64_t projected_stride, z_offset;
  const void* ba;
  const float* a_log;
  const float* dt_bias;
  const float* norm_w;
  StepLayout layout;
  DeltaNetShape shape;
  uint8_t* q_codes;  // optional FP8 output (dv == 128: one 1x128 group per head)
  float* q_scales;
};

// Fused Gated DeltaNet core per (sequence, value head), token by token with the state in
// registers: L2-norm q/k, beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias), delta-rule
// update of the recurrent state, then out = norm_w * rmsnorm(o) * silu(z).
// chunked_from > 0: sequences with at least that many tokens are left to gdn_chunked (same
// min_tokens) and untouched here; no rollback window then. 0 (decode): every sequence.
// seqs_per_cluster: the sequences each cluster walks in turn (0: the fewest that fit the grid into
// the resident CTAs; any count gives the same bits).
void gdn_recurrent(const GdnArgs& args, DType act, cudaStream_t stream, const GdnWindow& window = {},
                   int64_t chunked_from = 0, int seqs_per_cluster = 0);

// The same Gated DeltaNet core in chunks of kGdnChunk tokens (prefill): the CPU reference's
// UT-transform form (cpu::gated_delta_rule_chunked) for the sequences of the step with at least
// min_tokens (>= 1) tokens; the others are untouched (run gdn_recurrent with chunked_from =
// min_tokens for them). Same arguments, outputs, final states and FP8 codes as gdn_recurrent,
// never a rollback window; deterministic (fixed reduction orders, no atomics). Needs dk and dv
// multiples of 4 up to 128, conv_out and the scratch 16-byte aligned. scratch:
// gdn_chunked_scratch_floats(num_tokens, num_seqs, min_tokens, shape) floats of device memory
// (per token and value head ~(dk + dv + 66) floats, per chunk and value head dk * dv + 1).
// Three kernels: per (chunk, value head) norms, gating and the triangular solve; per (sequence, value head, 32 state columns) the state from chunk to
// chunk; per (chunk, value head) the outputs with the gated RMSNorm epilogue.
constexpr int64_t kGdnChunk = 64;
bool gdn_chunked_supports(const DeltaNetShape& shape);  // the head dims gdn_chunked takes
// Chunks a step can have: sum of ceil(len / 64) over its sequences with >= min_tokens tokens.
int64_t gdn_chunked_max_chunks(int64_t tokens, int64_t seqs, int64_t min_tokens);
int64_t gdn_chunked_scratch_floats(int64_t tokens, int64_t seqs, int64_t min_tokens, const DeltaNetShape& shape);
void gdn_chunked(const GdnArgs& args, DType act, cudaStream_t stream, float* scratch, int64_t scratch_floats,
                 int64_t min_tokens);

// dst[i] <- src[i] (count[i] f32 each) for every span, in one launch per 64 spans: the GDN states
// of all layers into or out of a rollback window entry.
struct CopySpan {
  float* dst;
  const float* src;
  int64_t count;
};
void copy_spans(const CopySpan* spans, int64_t num_spans, cudaStream_t stream);

}  // namespace vt::cuda
