// CUDA launchers. Kernels take raw pointers and a stream and include no engine headers; these
// launchers check arguments and the launch. "act" buffers hold the activation dtype (f32 or bf16);
// accumulation is fp32 everywhere. Shapes in comments are row-major.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;

namespace vt {
struct SampleRowParams;  // ops/device_sampling.h
}

namespace vt::cuda {

int device_count();
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void synchronize();

// ---- fp32 kernels with a CPU twin (tested against backends/cpu) ----
void rms_norm_f32(float* out, const float* x, const float* w, int64_t rows, int64_t n, float eps,
                  float weight_offset, cudaStream_t stream);
void silu_mul_f32(float* out, const float* gate_up, int64_t rows, int64_t n, cudaStream_t stream);

// ---- model kernels ----

// out [T, H] act = table [V, H] (f32/bf16/f16) at ids [T].
void embedding(void* out, DType act, const int32_t* ids, int64_t tokens, const void* table,
               DType table_dtype, int64_t hidden, cudaStream_t stream);

// A GEMM output [rows, n] left as the stream-K split's fp32 partials (fp8_gemm_wgmma_partials): the
// consumer adds each tile's shares in the order the GEMM's own sum would (fp8_gemm_split.h), so
// the result is that GEMM's output bit for bit, without the GEMM's CTAs waiting on each other.
struct GemmPartials {
  const float* words = nullptr;  // slots of [rows][128] words, n / 128 x max_owners of them
  int32_t rows = 0, n = 0, k_blocks = 0, ctas = 0, max_owners = 0;
};
// Whether fp8_gemm_wgmma_partials serves an M x N x K GEMM on the current device.
bool fp8_gemm_wgmma_partials_serves(int64_t m, int64_t n, int64_t k);

// What a norm adds to the residual: rows of act values, a GEMM's partials (rounded to act as the
// GEMM would store them), or nothing (null values).
struct Branch {
  const void* values = nullptr;
  const GemmPartials* partials = nullptr;
  Branch(std::nullptr_t) {}             // NOLINT: no branch
  Branch(const void* v) : values(v) {}  // NOLINT: a plain pointer is the usual branch
  Branch(const GemmPartials* p) : partials(p) {}
  bool empty() const { return !values && !partials; }
};

// residual [rows, n] += branch (skipped when it is empty); out = rmsnorm(residual) * (offset + w).
// w is f32 [n]. out may not alias residual. With q set (n % 128 == 0), also writes out's FP8
// quantisation for the next W8A8 linear: q [rows, n] e4m3, q_scales [rows, n/128] (as
// fp8_quantize_rows would, bit for bit). A partials branch needs n % 128 == 0.
void add_rms_norm(void* out, void* residual, Branch branch, const float* w, int64_t rows,
                  int64_t n, float eps, float weight_offset, DType act, cudaStream_t stream,
                  uint8_t* q = nullptr, float* q_scales = nullptr);

// out [rows, 2n] act = [rmsnorm(a) * (offset + w_a) | rmsnorm(b) * (offset + w_b)]: two rows normed
// side by side (the MTP head's fc input: normed embedding | normed hidden). a, b [rows, n] act;
// w_a, w_b f32 [n]. out may not alias a or b.
void rms_norm_concat(void* out, const void* a, const float* w_a, const void* b, const float* w_b, int64_t rows,
                     int64_t n, float eps, float weight_offset, DType act, cudaStream_t stream);

// gate_up [rows, 2n] act -> out [rows, n] act: silu(gate) * up. With q set (n % 128 == 0), also
// writes out's FP8 quantisation (q [rows, n], q_scales [rows, n/128]) for the down projection.
void silu_mul(void* out, const void* gate_up, int64_t rows, int64_t n, DType act, cudaStream_t stream,
              uint8_t* q = nullptr, float* q_scales = nullptr);

// Per-step batch layout shared by attention and GDN kernels. All arrays on the device.
struct StepLayout {
  const int32_t* token_seq;    // [T] sequence index of each token
  const int32_t* positions;    // [T] absolute position of each token
  const int32_t* seq_start;    // [S + 1] first token of each sequence in this step
  const int32_t* block_tables; // [slots, max_blocks] KV block ids of each slot
  const int32_t* slots;        // [S] cache slot of each sequence: its GDN state and block-table row
  int64_t num_tokens = 0, num_seqs = 0, max_blocks = 0;
};

struct AttentionShape {
  int64_t num_heads, num_kv_heads, head_dim, rotary_dim, block_size;
  float rope_theta, eps;
};

// Splits projected [T, Hq*2D + 2*Hkv*D] (per head [q | gate], then k, then v): q_norm/k_norm
// (zero-centred, f32 weights), partial NeoX RoPE, q -> q_out [T, Hq, D] f32, gate -> gate_out
// [T, Hq*D] act, k and v into the paged caches [blocks, block_size, Hkv, D] act.
void attention_prepare(float* q_out, void* gate_out, void* k_cache, void* v_cache, const void* projected,
                       const float* q_norm, const float* k_norm, const StepLayout& layout,
                       const AttentionShape& shape, DType act, cudaStream_t stream);

// Causal GQA attention of each token over its sequence's cache [0, position], times
// sigmoid(gate): out [T, Hq*D] act. The keys are split into `num_splits` ranges (flash-decoding:
// more blocks when few tokens; the grouped kernels split each token's visible keys evenly, the
// per-head kernel takes ranges of `keys_per_split`), merged in a fixed order; partials holds
// [T, Hq, num_splits, D + 2] f32.
// With q_codes set (head_dim % 128 == 0), also writes out's FP8 quantisation for the o_proj
// ([T, Hq*D] e4m3, [T, Hq*D/128] scales). kv_tokens: the keys the step's tokens see in all
// (sum of position + 1), for the bytes the profile reports (0 if unknown).
void paged_attention(void* out, float* partials, const float* q, const void* gate, const void* k_cache,
                     const void* v_cache, const StepLayout& layout, const AttentionShape& shape, int64_t num_splits,
                     int64_t keys_per_split, DType act, cudaStream_t stream, uint8_t* q_codes = nullptr,
                     float* q_scales = nullptr, int64_t kv_tokens = 0);

// How many (token, KV head, split) blocks one paged_attention launch should have when few tokens
// run, for the kernel it chooses for `shape` and `act`: one per SM for the tensor-core kernel (a
// block fills most of an SM's shared memory; measured on the H200: 132 blocks 484 us per step at
// batch 16 on the 27B, 512 blocks 654), 512 for the CUDA-core ones. The grouped kernels split each
// token's visible keys evenly over the splits (keys_per_split is the per-head kernel's).
int64_t attention_target_blocks(const AttentionShape& shape, DType act);

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
// stride `projected_stride`) -> conv_out [T, conv_dim] f32.
void gdn_conv(float* conv_out, float* conv_state, const void* projected, int64_t projected_stride,
              const float* conv_weight, const StepLayout& layout, const DeltaNetShape& shape, DType act,
              cudaStream_t stream, const GdnWindow& window = {});

// Fused Gated DeltaNet core per (sequence, value head), token by token with the state in
// registers: L2-norm q/k, beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias), delta-rule
// update of recurrent [slots, Hv, dk, dv] f32, then out = norm_w * rmsnorm(o) * silu(z).
// conv_out [T, conv_dim] f32; z: column block of `projected` [T, stride] act;
// ba [T, 2*Hv] act ([b | a]); out [T, Hv*dv] act. With q_codes set (dv == 128), also writes
// out's FP8 quantisation for the out_proj ([T, Hv*dv] e4m3, [T, Hv] scales).
// chunked_from > 0: sequences with at least that many tokens are left to gdn_chunked (same
// min_tokens) and untouched here; no rollback window then. 0 (decode): every sequence.
// seqs_per_cluster: the sequences each cluster walks in turn (0: the fewest that fit the grid into
// the resident CTAs; any count gives the same bits).
void gdn_recurrent(void* out, float* recurrent, const float* conv_out, const void* projected,
                   int64_t projected_stride, int64_t z_offset, const void* ba, const float* a_log,
                   const float* dt_bias, const float* norm_w, const StepLayout& layout,
                   const DeltaNetShape& shape, DType act, cudaStream_t stream, uint8_t* q_codes = nullptr,
                   float* q_scales = nullptr, const GdnWindow& window = {}, int64_t chunked_from = 0,
                   int seqs_per_cluster = 0);

// The same Gated DeltaNet core in chunks of kGdnChunk tokens (prefill): the CPU reference's
// UT-transform form (cpu::gated_delta_rule_chunked) for the sequences of the step with at least
// min_tokens (>= 1) tokens; the others are untouched (run gdn_recurrent with chunked_from =
// min_tokens for them). Same arguments, outputs, final states and FP8 codes as gdn_recurrent,
// never a rollback window; deterministic (fixed reduction orders, no atomics). Needs dk a
// multiple of 4, dk and dv <= 128. scratch: gdn_chunked_scratch_floats(num_tokens, num_seqs,
// min_tokens, shape) floats of device memory (per token and value head ~(dk + dv + 66) floats,
// per chunk and value head dk * dv + 1). Three kernels: per (chunk, value head) norms, gating and
// the triangular solve; per (sequence, value head, 32 state columns) the state from chunk to
// chunk; per (chunk, value head) the outputs with the gated RMSNorm epilogue.
constexpr int64_t kGdnChunk = 64;
bool gdn_chunked_supports(const DeltaNetShape& shape);  // the head dims gdn_chunked takes
// Chunks a step can have: sum of ceil(len / 64) over its sequences with >= min_tokens tokens.
int64_t gdn_chunked_max_chunks(int64_t tokens, int64_t seqs, int64_t min_tokens);
int64_t gdn_chunked_scratch_floats(int64_t tokens, int64_t seqs, int64_t min_tokens, const DeltaNetShape& shape);
void gdn_chunked(void* out, float* recurrent, const float* conv_out, const void* projected, int64_t projected_stride,
                 int64_t z_offset, const void* ba, const float* a_log, const float* dt_bias, const float* norm_w,
                 const StepLayout& layout, const DeltaNetShape& shape, DType act, cudaStream_t stream, float* scratch,
                 int64_t scratch_floats, int64_t min_tokens, uint8_t* q_codes = nullptr, float* q_scales = nullptr);

// dst[i] <- src[i] (count[i] f32 each) for every span, in one launch per 64 spans: the GDN states
// of all layers into or out of a rollback window entry.
struct CopySpan {
  float* dst;
  const float* src;
  int64_t count;
};
void copy_spans(const CopySpan* spans, int64_t num_spans, cudaStream_t stream);

// out [rows] = argmax over logits [rows, vocab] act (lowest index on ties).
void argmax_rows(int32_t* out, const void* logits, int64_t rows, int64_t vocab, DType act, cudaStream_t stream);

// Sampling on the device (kernels/sampling.cu): tokens [count] gets, for each params[i] (device
// [count]), a token drawn from row params[i].row of logits [rows, vocab] act: greedy (argmax,
// lowest index on ties), or temperature, top-k and top-p as the host Sampler::distribution, drawn
// by Gumbel-max with the counter-based RNG of ops/device_sampling.h (cpu::sample_rows is its twin,
// token for token). One block per row; deterministic (fixed-order reductions, integer histograms).
// Rows read the logits once (greedy, or temperature alone) to ten times (top-k and top-p: radix
// selects of three passes each): `bytes` is what the caller expects the launch to read
// (sample_row_bytes), for the profile (0: one pass per row).
void sample_rows(int32_t* tokens, const void* logits, int64_t vocab, DType act, const SampleRowParams* params,
                 int64_t count, cudaStream_t stream, double bytes = 0);

// Gathers rows: out [count, n] = in [index[i], n] (e.g. the last token of each sequence).
void gather_rows(void* out, const void* in, const int32_t* index, int64_t count, int64_t n, DType act,
                 cudaStream_t stream);

// ---- FP8 block-scaled linear (W8A8, activations 1x128 per token, weights 128x128 blocks) ----

// x [M, K] act -> q [M, K] e4m3 and scales [M, ceil(K/128)] f32 (scale = max(absmax,1e-10)/448).
void fp8_quantize_rows(uint8_t* q, float* scales, const void* x, int64_t m, int64_t k, DType act,
                       cudaStream_t stream);
// Activation scales [M, KB] -> [KB, M] (the layout cuBLASLt's 1x128 block scaling reads).
// (`n`: the GEMM's, so profiles file the transpose under the GEMM's m x n x k.)
void transpose_scales(float* out, const float* in, int64_t m, int64_t kb, int64_t n, cudaStream_t stream);
// w [N, K] (f32/bf16) -> e4m3 codes [N, K] and 128x128 block scales [ceil(N/128), ceil(K/128)]
// (scale = absmax / 448 per block): how a BF16 checkpoint tensor becomes an FP8 one at load.
void fp8_quantize_weight_blocks(uint8_t* q, float* scales, const void* w, DType dtype, int64_t n, int64_t k,
                                cudaStream_t stream);
// y [M, N] act (row stride ldy) = (q * a_scale) @ (w * w_scale)^T, fp32 accumulation.
// Backends: kGemv (M = 1 only: CUDA cores, a warp per two output columns, one 512-byte piece of
// each row per round in flight while the previous round is used), kWarpRows (CUDA cores, M tiles
// of up to 16 rows), kMma (tensor-core m16n8k32 e4m3, K split over a block's warps, up to 64 rows
// per weight pass); kAuto: kGemv at M = 1, else kMma (measured choices and overrides:
// fp8_gemm_registry.h); kGemvSplitK (M = 1: kGemv's loop with four columns per warp and K split
// between two warps), kGemvTma (M = 1: weight rows streamed into shared memory by bulk copies),
// kWgmma (any M, 64 rows per weight pass: 128 x 128 weight blocks streamed by the tensor copy
// engine into a ring of shared-memory stages, wgmma with the weights as A, a stream-K split of the
// blocks over one CTA per SM, shared tiles summed in CTA order; kernels/fp8_gemm_wgmma.cuh),
// kWgmmaCluster (the same kernel in clusters of 2..8 CTAs, one per 128-row tile, summed through
// distributed shared memory; where the tiles fill at most half the SMs:
// fp8_gemm_wgmma_cluster_serves).
enum class Fp8GemmBackend { kAuto, kGemv, kWarpRows, kMma, kGemvSplitK, kGemvTma, kWgmma, kWgmmaCluster };
// Whether kWgmmaCluster serves an M x N x K GEMM on the current device.
bool fp8_gemm_wgmma_cluster_serves(int64_t m, int64_t n, int64_t k, DType act);
const char* fp8_gemm_kernel_name(Fp8GemmBackend backend);  // the kernel a backend launches
int64_t fp8_gemm_launches(Fp8GemmBackend backend, int64_t m);  // its launches for M rows
// Device resources the backends keep per GPU and stream (the wgmma GEMM's partials), made outside
// any graph capture: the CUDA model calls it on its stream at set-up.
void fp8_gemm_prepare(cudaStream_t stream);
void fp8_gemm_release(cudaStream_t stream);  // frees them (the stream's work done), before it is destroyed
void fp8_block_gemm(void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
                    const float* w_scales, int64_t m, int64_t n, int64_t k, DType act, cudaStream_t stream,
                    Fp8GemmBackend backend = Fp8GemmBackend::kAuto);
// The same product left as the wgmma stream-K split's partials for add_rms_norm (GemmPartials;
// fp8_gemm_wgmma_partials_serves says where): valid until the next such call on the stream.
GemmPartials fp8_block_gemm_partials(const uint8_t* q, const float* a_scales, const uint8_t* w, const float* w_scales,
                                     int64_t m, int64_t n, int64_t k, cudaStream_t stream);

// ---- an FP8 output layer's exact columns (Fp8Quantization::exact_columns, model/linear.h) ----
// Each column's sum of squares of w [n, k] (f32/bf16), in double, on the host (chunks of rows
// summed on the device, the chunks in order here); synchronises the stream.
std::vector<double> column_sum_squares(const void* w, DType dtype, int64_t n, int64_t k, cudaStream_t stream);
// out [n, count] = w[:, columns[i]]; then those columns of w are set to zero (before w is quantised).
void take_columns(void* out, void* w, DType dtype, const int32_t* columns, int64_t count, int64_t n, int64_t k,
                  cudaStream_t stream);
// y [m, n] (row stride ldy) += x [m, k] at columns @ w [n, count]^T, all act, fp32 sums; count a
// multiple of 8, at most 64 (exact_columns_supported).
bool exact_columns_supported(int64_t count);
void exact_columns_add(void* y, int64_t ldy, const void* x, const int32_t* columns, const void* w, int64_t m,
                       int64_t n, int64_t k, int64_t count, DType act, cudaStream_t stream);

// ---- small dense linears ----
// y [m, n] (act or f32) = x [m, k] act @ w [n, k]^T act, for m <= 8, or m <= 16 where the m x k
// activations fit in 200 KB of shared memory, and k % 8 == 0: one block per output row (the GDN
// b/a projections, MoE routers), deterministic.
bool dense_gemv_supports(int64_t m, int64_t n, int64_t k, DType act);
void dense_gemv(void* y, DType out_dtype, const void* x, const void* w, int64_t m, int64_t n, int64_t k, DType act,
                cudaStream_t stream);

// ---- MoE ----
// Softmax over logits [T, E] act, top-k per token (ties to the lower id), optionally
// renormalised: ids [T, k] i32, weights [T, k] f32.
void moe_route(int32_t* ids, float* weights, const void* logits, int64_t tokens, int64_t experts, int64_t top_k,
               bool renormalize, DType act, cudaStream_t stream);
// y [pairs, n] act = W[expert_ids[p]] [n, k] . x[p / input_divisor] for every (token, expert)
// pair p; weights stacked [E, n, k] in act dtype or e4m3 (with [E, n/128, k/128] scales and x as
// e4m3 codes with [rows, k/128] scales).
void moe_expert_gemv(void* y, const void* x, const float* x_scales, const int32_t* expert_ids, const void* weights,
                     const float* w_scales, int64_t pairs, int64_t n, int64_t k, int64_t input_divisor, bool fp8,
                     DType act, cudaStream_t stream);
// out [T, H] = sum_j weights[t, j] expert_out[t*k + j] (+ sigmoid(shared_gate[t]) shared[t] when
// shared is not null).
void moe_combine(void* out, const void* expert_out, const float* weights, const void* shared, const void* shared_gate,
                 int64_t tokens, int64_t hidden, int64_t top_k, DType act, cudaStream_t stream);

// ---- synthetic weights ----
// Deterministic pseudo-random fill (hash of seed and index): uniform in [-scale, scale] + offset.
void fill_random(void* data, DType dtype, int64_t count, uint64_t seed, float scale, float offset,
                 cudaStream_t stream);
// Random E4M3 codes with magnitudes up to 448 (no NaN codes).
void fill_random_fp8(uint8_t* data, int64_t count, uint64_t seed, cudaStream_t stream);

// Converts any float dtype to `out_dtype` (f32 or bf16) on the device.
void convert(void* out, DType out_dtype, const void* in, DType in_dtype, int64_t count, cudaStream_t stream);

// Reads `bytes` of device memory once; returns GB/s (read-only bandwidth for the floor).
double measure_read_bandwidth(size_t bytes);
// A kernel of one CTA per SM that runs about `microseconds` after the previous kernel (it may
// overlap the next one's start, PDL): the stand-in for the op before a GEMM when the GEMM registry
// and `vt bench gemm` time GEMMs as a decode step runs them. `sink`: one float, never written.
void stand_in_kernel(double microseconds, float* sink, cudaStream_t stream);
// Reads `bytes` (16-byte aligned) once with `blocks` x `threads` threads, launched as the model's
// kernels are (after the previous kernel, PDL): a pure read of a GEMM's weight bytes, the floor
// `vt bench gemm` puts beside each GEMM. `sink` (one float) is written only to keep the loads.
void read_bytes(const void* data, size_t bytes, int64_t blocks, int threads, float* sink, cudaStream_t stream);

}  // namespace vt::cuda
