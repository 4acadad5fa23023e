// Chunked Gated DeltaNet for prefill: the CPU reference's UT-transform form
// (cpu::gated_delta_rule_chunked) in chunks of 64 tokens, so a long sequence costs 64-token matrix
// work per chunk instead of a serial chain of block reductions per token. Three kernels:
//   prepare (chunk, value head):  L2-norm q/k, gating g and beta, c = cumsum(g) within the chunk,
//     A = strictly_lower((beta_i k_i.k_j) e^{c_i - c_j}), attn = lower((q_i.k_j) e^{c_i - c_j}),
//     the unit lower-triangular solve U = (I + A)^-1 (beta v), W = (I + A)^-1 (beta k e^c);
//   state (sequence, value head, 32 state columns), chunk after chunk:
//     saves S (the chunk's start state), V' = U - W S, S = e^{c_last} S + (k e^{c_last - c})^T V',
//     the next chunk's rows copied (cp.async) while this one's products run;
//   output (chunk, value head): O = (q e^c) S_start + attn V', then the gated RMSNorm epilogue
//     (and the optional FP8 codes) exactly as sm90_gdn_recurrent writes them.
// The products run on the tensor cores in TF32: for f32 activations in 3xTF32 (fp32-accurate, see
// mma_xtf32), for bf16 ones in one TF32 product (2^-11 per operand, a quarter of the bf16 rounding
// around it); the rest in fp32; fixed reduction orders, no atomics: bit-identical run to run.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "cuda/mbarrier.cuh"
#include "ops/gdn/gdn.h"
#include "ops/step_layout.h"

namespace vt::cuda {
namespace {

constexpr int kChunk = int(kGdnChunk);
constexpr int kMaxDk = 128, kMaxDv = 128;
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kScanTile = 256;  // sequences staged per pass when locating a chunk
// state: S [128][32], W and k e^{c_last - c} [64][128] each, V' [64][32]; rows padded so that
// the tensor-core fragments' shared loads are conflict-free (A operands: ld = 4 mod 32 read row-wise,
// 8 mod 32 read transposed; B operands: 8 mod 32) and stay 16-byte aligned for cp.async.
constexpr int kStateCols = 32;
constexpr int kStateLd = kStateCols + 8, kWLd = kMaxDk + 4, kKLd = kMaxDk + 8;
constexpr size_t kStateShared =
    sizeof(float) * (kMaxDk * kStateLd + kChunk * kWLd + kChunk * kKLd + kChunk * kStateLd);
// output: phase 1 S [128][128] + q [64][128]; phase 2 (same memory) V' [64][128] + attn [64][64],
// then O [64][128] for the epilogue; padded as the state's.
constexpr int kOutLd = kMaxDv + 8, kQLd = kMaxDk + 4, kAttnLd = kChunk + 4;
constexpr int kOutRows = kChunk / kWarps;  // epilogue rows per warp (8)
constexpr int kOutCols = kMaxDv / 32;      // epilogue columns per lane (4)
constexpr size_t kOutputShared = sizeof(float) * (kMaxDk * kOutLd + kChunk * kQLd);
// prepare: q and k [64][kQLd] each, then (same memory) [U | W] [64][kXLd]; A [64][kAttnLd] and five
// per-row scalars.
constexpr int kXLd = kMaxDv + kMaxDk + 8;
constexpr size_t kPrepareShared = sizeof(float) * (kChunk * kXLd + kChunk * kAttnLd + 5 * kChunk);
static_assert(2 * kQLd <= kXLd, "prepare: [U | W] over q and k");
static_assert(kThreads >= kMaxDk + kMaxDv, "prepare: one thread per column of [U | W]");
static_assert(kChunk * (kOutLd + kAttnLd + kQLd) <= kMaxDk * kOutLd + kChunk * kQLd, "output phase 2 fits");
static_assert(kChunk == 64 && kMaxDk == 128 && kMaxDv == 128 && kWarps == 8, "the tensor-core tilings");

// The step's scratch, carved by the launcher (gdn_chunked_scratch_floats): per token and value head
// W [dk], U then V' [dv], the attn row [64] and the factors {q: rnorm dk^-0.5 e^{c}, k: rnorm
// e^{c_last - c}}; per chunk and value head e^{c_last} and the start state [dk, dv].
struct Scratch {
  float *w, *u, *attn, *factors, *decay, *states;
};

struct ChunkedArgs : GdnArgs {
  Scratch scratch;
  int32_t min_tokens;
};

struct ChunkRef {
  int32_t seq, first, count, index;  // sequence, first token in the step, tokens (<= 64), chunk id in the step
};

// The chunks of the step: those of the sequences with >= min_tokens tokens, in sequence order.
// Finds chunk `target_chunk` (target_seq < 0; seq = -1 past the last) or the first chunk of
// sequence `target_seq`. Thread 0 walks seq_start, a tile at a time through shared memory; every
// thread of the block must call it and gets the result.
__device__ ChunkRef locate_chunk(const StepLayout& layout, int32_t min_tokens, int32_t target_chunk,
                                 int32_t target_seq) {
  __shared__ int32_t s_starts[kScanTile + 1];
  __shared__ ChunkRef s_ref;
  __shared__ int32_t s_done;
  if (threadIdx.x == 0) {
    s_ref = ChunkRef{-1, 0, 0, 0};
    s_done = 0;
  }
  int32_t base = 0;  // thread 0: chunks of the sequences before the tile's current one
  for (int64_t tile = 0; tile < layout.num_seqs; tile += kScanTile) {
    const int n = int(layout.num_seqs - tile < kScanTile ? layout.num_seqs - tile : kScanTile);
    __syncthreads();  // s_ref / s_done initialised; the previous tile's scan is over
    for (int i = threadIdx.x; i <= n; i += blockDim.x) s_starts[i] = layout.seq_start[tile + i];
    __syncthreads();
    if (threadIdx.x == 0 && !s_done) {
      for (int i = 0; i < n; ++i) {
        const int32_t seq = int32_t(tile) + i, len = s_starts[i + 1] - s_starts[i];
        const int32_t chunks = len >= min_tokens ? (len + kChunk - 1) / kChunk : 0;
        if (target_seq >= 0 ? seq == target_seq : target_chunk < base + chunks) {
          const int32_t index = target_seq >= 0 ? 0 : target_chunk - base;
          s_ref = ChunkRef{seq, s_starts[i] + index * kChunk, min(kChunk, len - index * kChunk), base + index};
          s_done = 1;
          break;
        }
        base += chunks;
      }
    }
    __syncthreads();
    if (s_done) break;
  }
  __syncthreads();
  return s_ref;
}

__device__ __forceinline__ float softplus(float a) { return a > 20.0f ? a : log1pf(expf(a)); }

// 16 bytes from global to shared memory without waiting; zeros where !valid (nothing is read).
__device__ __forceinline__ void copy_16(float* destination, const float* source, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(device::smem_address(destination)),
               "l"(source), "r"(valid ? 16 : 0)
               : "memory");
}

// The products on the tensor cores: mma.sync m16n8k8 in TF32 with each f32 operand split into a
// TF32 high part and the TF32 rounding of its remainder. kTerms 3 sums lo * hi + hi * lo + hi * hi
// ("3xTF32"): the dropped lo * lo term is ~2^-22 of the product, so the result is fp32-accurate
// (kCudaChunkedDeltaRuleRelL2 holds). kTerms 1, for bf16 activations, takes hi * hi alone: 2^-11
// per operand, below the bf16 rounding (2^-9) of every input and output around it, and a third of
// the mma.sync issue (flash-linear-attention, the peer, multiplies in bf16). The lo parts are then
// dead code.
// Fragments (PTX ISA, m16n8k8 .tf32), g = lane / 4, t = lane % 4: A rows g, g + 8 x columns t, t + 4;
// B rows t, t + 4 x column g; C rows g, g + 8 x columns 2t, 2t + 1.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

template <int N>
struct Split {
  uint32_t hi[N], lo[N];
};

template <int N>
__device__ __forceinline__ Split<N> split(const float (&x)[N]) {
  Split<N> s;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    s.hi[i] = to_tf32(x[i]);
    s.lo[i] = to_tf32(x[i] - __uint_as_float(s.hi[i]));
  }
  return s;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int kTerms>
__device__ __forceinline__ void mma_xtf32(float (&d)[4], const Split<4>& a, const Split<2>& b) {
  static_assert(kTerms == 1 || kTerms == 3, "1xTF32 or 3xTF32");
  if constexpr (kTerms == 3) {
    mma_tf32(d, a.lo, b.hi);
    mma_tf32(d, a.hi, b.lo);
  }
  mma_tf32(d, a.hi, b.hi);
}

// One TF32 product for bf16 activations, three for f32 (see mma_xtf32).
template <typename T>
constexpr int kTermsFor = std::is_same_v<T, float> ? 3 : 1;

// A fragment of the 16 x 8 tile at (r0, k0) of a row-major shared matrix (row stride `ld`).
__device__ __forceinline__ Split<4> load_a(const float* s, int ld, int r0, int k0, int g, int t) {
  const float a[4] = {s[(r0 + g) * ld + k0 + t], s[(r0 + g + 8) * ld + k0 + t], s[(r0 + g) * ld + k0 + t + 4],
                      s[(r0 + g + 8) * ld + k0 + t + 4]};
  return split(a);
}

// The same from a transposed shared matrix: A[m][k] = s[k][m].
__device__ __forceinline__ Split<4> load_a_transposed(const float* s, int ld, int r0, int k0, int g, int t) {
  const float a[4] = {s[(k0 + t) * ld + r0 + g], s[(k0 + t) * ld + r0 + g + 8], s[(k0 + t + 4) * ld + r0 + g],
                      s[(k0 + t + 4) * ld + r0 + g + 8]};
  return split(a);
}

// B fragment of the 8 x 8 tile at (k0, n0) of a row-major shared matrix B[k][n].
__device__ __forceinline__ Split<2> load_b(const float* s, int ld, int k0, int n0, int g, int t) {
  const float b[2] = {s[(k0 + t) * ld + n0 + g], s[(k0 + t + 4) * ld + n0 + g]};
  return split(b);
}

__device__ __forceinline__ void store2(float* p, float x, float y) { *reinterpret_cast<float2*>(p) = make_float2(x, y); }

// B fragment from a transposed shared matrix: B[k][n] = s[n][k].
__device__ __forceinline__ Split<2> load_b_transposed(const float* s, int ld, int k0, int n0, int g, int t) {
  const float b[2] = {s[(n0 + g) * ld + k0 + t], s[(n0 + g) * ld + k0 + t + 4]};
  return split(b);
}

// Grid (chunk bound, value head), kThreads threads.
template <typename T>
__global__ void __launch_bounds__(kThreads) sm90_gdn_chunk_prepare(ChunkedArgs args) {
  constexpr int kTerms = kTermsFor<T>;
  extern __shared__ float4 shared_f4[];
  float* s_q = reinterpret_cast<float*>(shared_f4);  // [64][kQLd], normalised, q scaled
  float* s_k = s_q + kChunk * kQLd;                   // [64][kQLd], normalised
  float* s_x = s_q;                                   // [64][kXLd] [U | W], once q and k are read
  float* s_a = s_q + kChunk * kXLd;                   // [64][kAttnLd] strictly lower A
  float* s_c = s_a + kChunk * kAttnLd;                // [64] cumsum(g)
  float* s_g = s_c + kChunk;                          // [64] g
  float* s_beta = s_g + kChunk;                       // [64]
  float* s_qn = s_beta + kChunk;                      // [64] q rnorm
  float* s_kn = s_qn + kChunk;                        // [64] k rnorm
  device::pdl_enter();
  const ChunkRef chunk = locate_chunk(args.layout, args.min_tokens, int32_t(blockIdx.x), -1);
  if (chunk.seq < 0) return;
  const auto& shape = args.shape;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t head = blockIdx.y, hk = shape.num_k_heads, hv = shape.num_v_heads;
  const int dk = int(shape.k_dim), dv = int(shape.v_dim), L = chunk.count, dk8 = (dk + 7) / 8 * 8;
  const int64_t key_head = head / (hv / hk), conv_dim = 2 * hk * dk + hv * dv, t0 = chunk.first;
  const Scratch& scratch = args.scratch;

  // Raw q and k rows (zero past the chunk's tokens and past dk), copied at once.
  constexpr int kRowQuads = kMaxDk / 4;
#pragma unroll
  for (int n = 0; n < kChunk * kRowQuads / kThreads; ++n) {
    const int idx = tid + n * kThreads, i = idx / kRowQuads, d = 4 * (idx % kRowQuads);
    const bool valid = i < L && d < dk;
    const float* row = args.conv_out + (t0 + i) * conv_dim;
    copy_16(s_q + i * kQLd + d, valid ? row + key_head * dk + d : args.conv_out, valid);
    copy_16(s_k + i * kQLd + d, valid ? row + hk * dk + key_head * dk + d : args.conv_out, valid);
  }
  device::cp_async_commit();
  device::cp_async_wait<0>();
  __syncthreads();
  // Per token: the L2 norms (one warp per row, fixed order), beta and g.
  const T* ba = static_cast<const T*>(args.ba);
  const float a_log = args.a_log[head], dt_bias = args.dt_bias[head];
  for (int i = warp; i < kChunk; i += kWarps) {
    float qq = 0.0f, kk = 0.0f;
    for (int d = lane; d < kMaxDk; d += 32) {
      qq += s_q[i * kQLd + d] * s_q[i * kQLd + d];
      kk += s_k[i * kQLd + d] * s_k[i * kQLd + d];
    }
    qq = device::warp_sum(qq);
    kk = device::warp_sum(kk);
    if (lane == 0) {
      float beta = 0.0f, gate = 0.0f;
      if (i < L) {
        beta = device::sigmoid(device::to_float(ba[(t0 + i) * 2 * hv + head]));
        const float a = device::to_float(ba[(t0 + i) * 2 * hv + hv + head]) + dt_bias;
        gate = -expf(a_log) * softplus(a);
      }
      s_qn[i] = rsqrtf(qq + 1e-6f);
      s_kn[i] = rsqrtf(kk + 1e-6f);
      s_beta[i] = beta;
      s_g[i] = gate;
    }
  }
  __syncthreads();
  if (tid == 0) {
    float running = 0.0f;
    for (int i = 0; i < kChunk; ++i) s_c[i] = running += s_g[i];  // rows past L repeat c_{L-1}
  }
  const float q_scale = rsqrtf(float(dk));
  for (int idx = tid; idx < kChunk * kMaxDk; idx += kThreads) {
    const int i = idx / kMaxDk, d = idx % kMaxDk;
    s_q[i * kQLd + d] = s_q[i * kQLd + d] * s_qn[i] * q_scale;  // as sm90_gdn_recurrent
    s_k[i * kQLd + d] *= s_kn[i];
  }
  __syncthreads();

  // k_i.k_j and q_i.k_j on the tensor cores: warp w the rows 16 (w % 4).. and columns 32 (w / 4)..;
  // tiles wholly above the diagonal are masked to zero anyway and skipped.
  {
    const int om0 = 16 * (warp % 4), on0 = 32 * (warp / 4);
    float kk[4][4] = {}, qk[4][4] = {};
    for (int k0 = 0; k0 < dk8; k0 += 8) {
      const Split<4> ak = load_a(s_k, kQLd, om0, k0, g, t), aq = load_a(s_q, kQLd, om0, k0, g, t);
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        if (on0 + 8 * n > om0 + 15) continue;  // warp-uniform
        const Split<2> b = load_b_transposed(s_k, kQLd, k0, on0 + 8 * n, g, t);
        mma_xtf32<kTerms>(kk[n], ak, b);
        mma_xtf32<kTerms>(qk[n], aq, b);
      }
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = om0 + g + 8 * h, j = on0 + 8 * n + 2 * t;
        float attn[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float decay = j + e <= i && i < L ? expf(s_c[i] - s_c[j + e]) : 0.0f;
          s_a[i * kAttnLd + j + e] = j + e < i && i < L ? s_beta[i] * kk[n][2 * h + e] * decay : 0.0f;
          attn[e] = qk[n][2 * h + e] * decay;
        }
        if (i < L) store2(scratch.attn + ((t0 + i) * hv + head) * kChunk + j, attn[0], attn[1]);
      }
  }

  // [U | W] = (I + A)^-1 [beta v | beta k e^c], columns U 0..127 and W 128..255 of s_x, one per
  // thread. The right-hand sides go through registers: s_x takes the memory of q and k.
  const bool value = tid < kMaxDv;
  const int d = value ? tid : tid - kMaxDv;
  const bool active = value ? d < dv : d < dk;
  float x[kChunk];
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    x[i] = 0.0f;
    if (active && i < L)
      x[i] = value ? s_beta[i] * args.conv_out[(t0 + i) * conv_dim + 2 * hk * dk + head * dv + d]
                   : s_beta[i] * s_k[i * kQLd + d] * expf(s_c[i]);
  }
  __syncthreads();  // q and k read (and s_a written)
#pragma unroll
  for (int i = 0; i < kChunk; ++i) s_x[i * kXLd + tid] = x[i];
  __syncthreads();
  // Blocked forward substitution over 16-row blocks: block b's rows first lose A[b, <b] X[<b]
  // (tensor cores; warp w the columns 32 w..), then the unit lower-triangular 16 x 16 diagonal block
  // is solved one column per thread.
  float* dst = value ? scratch.u + (t0 * hv + head) * dv + d : scratch.w + (t0 * hv + head) * dk + d;
  const int64_t row_stride = value ? hv * dv : hv * dk;
  for (int r0 = 0; r0 < L; r0 += 16) {
    if (r0 > 0) {
      float acc[4][4] = {};
      for (int k0 = 0; k0 < r0; k0 += 8) {
        const Split<4> a = load_a(s_a, kAttnLd, r0, k0, g, t);
#pragma unroll
        for (int n = 0; n < 4; ++n) mma_xtf32<kTerms>(acc[n], a, load_b(s_x, kXLd, k0, 32 * warp + 8 * n, g, t));
      }
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float2* p = reinterpret_cast<float2*>(&s_x[(r0 + g + 8 * h) * kXLd + 32 * warp + 8 * n + 2 * t]);
          float2 v = *p;
          v.x -= acc[n][2 * h];
          v.y -= acc[n][2 * h + 1];
          *p = v;
        }
      __syncthreads();
    }
    float y[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) y[r] = s_x[(r0 + r) * kXLd + tid];
#pragma unroll
    for (int r = 1; r < 16; ++r)
#pragma unroll
      for (int j = 0; j < r; ++j) y[r] = fmaf(-s_a[(r0 + r) * kAttnLd + r0 + j], y[j], y[r]);
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      s_x[(r0 + r) * kXLd + tid] = y[r];
      if (active && r0 + r < L) dst[(r0 + r) * row_stride] = y[r];
    }
    __syncthreads();
  }
  if (tid < L) {
    const float last = s_c[L - 1];
    float2 factors;
    factors.x = s_qn[tid] * q_scale * expf(s_c[tid]);
    factors.y = s_kn[tid] * expf(last - s_c[tid]);
    reinterpret_cast<float2*>(scratch.factors)[(t0 + tid) * hv + head] = factors;
    if (tid == 0) scratch.decay[int64_t(chunk.index) * hv + head] = expf(last);
  }
}

// The state walk's copies of one chunk: L rows of dk floats (row t of the step at rows + t *
// stride) into shared rows of `ld` floats, each thread its float4s tid, tid + 256, ... (kCopies at
// most), without waiting. The same thread later scales the same float4s (no barrier in between).
constexpr int kCopies = kChunk * kMaxDk / 4 / kThreads;
__device__ __forceinline__ void copy_chunk_rows(float* shared, int ld, const float* rows, int64_t stride, int64_t t0,
                                                int L, int dk) {
  const int quads = dk / 4;
#pragma unroll
  for (int n = 0; n < kCopies; ++n) {
    const int idx = int(threadIdx.x) + n * kThreads;
    if (idx < L * quads) {
      const int i = idx / quads, q = idx - i * quads;
      copy_16(shared + i * ld + 4 * q, rows + (t0 + i) * stride + 4 * q, true);
    }
  }
}

// Grid (sequence, value head, column group of 32), kThreads threads: the state S[:, 32 columns]
// chunk after chunk, on the tensor cores. V' = U - W S: warp w owns rows 16 (w % 4).. of the chunk
// and columns 16 (w / 4)..; S = e^{c_last} S + (k e^{c_last - c})^T V': warp w owns rows 16 w.. of
// S, all 32 columns, held in registers (C fragments) between chunks. The next chunk's W rows are
// copied (cp.async) while this chunk's state update runs, its k rows while its V' product runs, so
// the walk waits on L2 once per chunk at most rather than once per row. kTerms: see mma_xtf32.
template <int kTerms>
__global__ void __launch_bounds__(kThreads, 2) sm90_gdn_chunk_state(ChunkedArgs args) {
  extern __shared__ float4 shared_f4[];
  float* s_s = reinterpret_cast<float*>(shared_f4);  // [128][kStateLd] S at the chunk's start
  float* s_w = s_s + kMaxDk * kStateLd;               // [64][kWLd] W
  float* s_kd = s_w + kChunk * kWLd;                  // [64][kKLd] k rnorm e^{c_last - c}
  float* s_v = s_kd + kChunk * kKLd;                  // [64][kStateLd] V'
  device::pdl_enter();
  const int64_t seq = blockIdx.x;
  const int32_t seq_first = args.layout.seq_start[seq], seq_end = args.layout.seq_start[seq + 1];
  if (seq_end - seq_first < args.min_tokens) return;  // token by token (gdn_recurrent)
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // Columns past dk stay zero (the state rows past dk then stay zero); locate_chunk syncs before
  // the first copy lands there.
  for (int idx = tid; idx < kChunk * (kWLd + kKLd); idx += kThreads) s_w[idx] = 0.0f;  // s_w and s_kd
  const ChunkRef first_chunk = locate_chunk(args.layout, args.min_tokens, -1, int32_t(seq));
  const auto& shape = args.shape;
  const int64_t head = blockIdx.y, hk = shape.num_k_heads, hv = shape.num_v_heads;
  const int dk = int(shape.k_dim), dv = int(shape.v_dim), dk8 = (dk + 7) / 8 * 8;
  const int64_t key_head = head / (hv / hk), conv_dim = 2 * hk * dk + hv * dv;
  const int col0 = int(blockIdx.z) * kStateCols;     // the group's first column
  const int vm0 = 16 * (warp % 4), vn0 = 16 * (warp / 4), sm0 = 16 * warp;
  const Scratch& scratch = args.scratch;
  float* state = args.recurrent + (int64_t(args.layout.slots[seq]) * hv + head) * dk * dv;
  const float* w_rows = scratch.w + head * dk;                               // row t: + t * hv * dk
  const float* k_rows = args.conv_out + hk * dk + key_head * dk;             // row t: + t * conv_dim
  const int quads = dk / 4;

  // The k rows' factors (rnorm e^{c_last - c}) of this thread's float4s, read as the copies go.
  float k_factor[kCopies];
  const auto copy_k = [&](int64_t t0, int L) {
    copy_chunk_rows(s_kd, kKLd, k_rows, conv_dim, t0, L, dk);
#pragma unroll
    for (int n = 0; n < kCopies; ++n) {
      const int idx = tid + n * kThreads;
      if (idx < L * quads) k_factor[n] = scratch.factors[((t0 + idx / quads) * hv + head) * 2 + 1];
    }
  };
  // U at this warp's V' fragment: [n][h]: rows vm0 + g + 8h, columns vn0 + 8n + 2t (+1).
  const auto load_u = [&](float2 (&u)[2][2], int64_t t0, int L) {
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = vm0 + g + 8 * h, c = col0 + vn0 + 8 * n + 2 * t;
        u[n][h] = i < L && c < dv ? *reinterpret_cast<const float2*>(&scratch.u[((t0 + i) * hv + head) * dv + c])
                                  : make_float2(0.0f, 0.0f);
      }
  };

  // S at this warp's fragments: [n][2h + e]: row sm0 + g + 8h, column col0 + 8n + 2t + e.
  float r_s[4][4];
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = sm0 + g + 8 * h, c = col0 + 8 * n + 2 * t;
      const float2 value =
          d < dk && c < dv ? *reinterpret_cast<const float2*>(&state[d * dv + c]) : make_float2(0.0f, 0.0f);
      r_s[n][2 * h] = value.x;
      r_s[n][2 * h + 1] = value.y;
    }
  // Groups of copies in flight, oldest first: W(chunk), k(chunk), W(chunk + 1), k(chunk + 1)...
  copy_chunk_rows(s_w, kWLd, w_rows, hv * dk, seq_first, min(kChunk, seq_end - seq_first), dk);
  device::cp_async_commit();
  copy_k(seq_first, min(kChunk, seq_end - seq_first));
  device::cp_async_commit();
  float2 u[2][2];
  load_u(u, seq_first, min(kChunk, seq_end - seq_first));
  for (int32_t t0 = seq_first, index = first_chunk.index; t0 < seq_end; t0 += kChunk, ++index) {
    const int L = min(kChunk, seq_end - t0);
    const int32_t next = t0 + kChunk;
    const int next_L = next < seq_end ? min(kChunk, seq_end - next) : 0;
    // The chunk's start state: to shared memory for V', to the scratch for the output kernel.
    float* saved = scratch.states + (int64_t(index) * hv + head) * dk * dv;
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int d = sm0 + g + 8 * h, c = 8 * n + 2 * t;
        store2(&s_s[d * kStateLd + c], r_s[n][2 * h], r_s[n][2 * h + 1]);
        if (d < dk && col0 + c < dv) store2(&saved[d * dv + col0 + c], r_s[n][2 * h], r_s[n][2 * h + 1]);
      }
    const float chunk_decay = scratch.decay[int64_t(index) * hv + head];
    device::cp_async_wait<1>();  // this chunk's W (its k rows may still be in flight)
    __syncthreads();

    // V' = U - W S for this warp's tile.
    float acc[2][4] = {};
    for (int k0 = 0; k0 < dk8; k0 += 8) {
      const Split<4> a = load_a(s_w, kWLd, vm0, k0, g, t);
#pragma unroll
      for (int n = 0; n < 2; ++n) mma_xtf32<kTerms>(acc[n], a, load_b(s_s, kStateLd, k0, vn0 + 8 * n, g, t));
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = vm0 + g + 8 * h, c = vn0 + 8 * n + 2 * t;
        const float v0 = i < L ? u[n][h].x - acc[n][2 * h] : 0.0f, v1 = i < L ? u[n][h].y - acc[n][2 * h + 1] : 0.0f;
        store2(&s_v[i * kStateLd + c], v0, v1);
        if (i < L && col0 + c < dv) store2(&scratch.u[((t0 + i) * hv + head) * dv + col0 + c], v0, v1);
      }
    __syncthreads();  // W read: the next chunk's rows may land
    if (next_L > 0) copy_chunk_rows(s_w, kWLd, w_rows, hv * dk, next, next_L, dk);
    device::cp_async_commit();
    if (next_L > 0) load_u(u, next, next_L);
    device::cp_async_wait<1>();  // this chunk's k rows (the next W may still be in flight)
    // k e^{c_last - c}: this thread's own float4s, then the barrier shows them to all.
#pragma unroll
    for (int n = 0; n < kCopies; ++n) {
      const int idx = tid + n * kThreads;
      if (idx < L * quads) {
        const int i = idx / quads, q = idx - i * quads;
        float4* k4 = reinterpret_cast<float4*>(&s_kd[i * kKLd + 4 * q]);
        float4 value = *k4;
        value.x *= k_factor[n];
        value.y *= k_factor[n];
        value.z *= k_factor[n];
        value.w *= k_factor[n];
        *k4 = value;
      }
    }
    __syncthreads();

    // S = e^{c_last} S + (k e^{c_last - c})^T V' for this warp's rows of S. V' rows past L are
    // zero, so the k rows there (the previous chunk's, finite) add nothing.
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) r_s[n][e] *= chunk_decay;
    for (int j0 = 0; j0 < L; j0 += 8) {
      const Split<4> a = load_a_transposed(s_kd, kKLd, sm0, j0, g, t);
#pragma unroll
      for (int n = 0; n < 4; ++n) mma_xtf32<kTerms>(r_s[n], a, load_b(s_v, kStateLd, j0, 8 * n, g, t));
    }
    __syncthreads();  // s_s, s_kd and s_v are rewritten by the next chunk
    if (next_L > 0) copy_k(next, next_L);
    device::cp_async_commit();
  }
  device::cp_async_wait_all();
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = sm0 + g + 8 * h, c = col0 + 8 * n + 2 * t;
      if (d < dk && c < dv) store2(&state[d * dv + c], r_s[n][2 * h], r_s[n][2 * h + 1]);
    }
}

// Grid (chunk bound, value head), kThreads threads, on the tensor cores: O = (q rnorm dk^-0.5 e^c)
// S_start + attn V', warp w owning rows 16 (w % 4).. and columns 64 (w / 4).. of the chunk's
// [64][dv] output; then per row (one warp, from shared memory): out = norm_w * rmsnorm(O) *
// silu(z) and its FP8 codes, as sm90_gdn_recurrent writes them.
template <typename T>
__global__ void __launch_bounds__(kThreads) sm90_gdn_chunk_output(ChunkedArgs args) {
  constexpr int kTerms = kTermsFor<T>;
  extern __shared__ float4 shared_f4[];
  float* s_s = reinterpret_cast<float*>(shared_f4);  // phase 1: [128][kOutLd] S at the chunk's start
  float* s_q = s_s + kMaxDk * kOutLd;                 // phase 1: [64][kQLd] q, scaled
  float* s_v = reinterpret_cast<float*>(shared_f4);   // phase 2: [64][kOutLd] V'
  float* s_attn = s_v + kChunk * kOutLd;              // phase 2: [64][kAttnLd]
  float* s_o = s_attn + kChunk * kAttnLd;             // epilogue: [64][kQLd] O
  device::pdl_enter();
  const ChunkRef chunk = locate_chunk(args.layout, args.min_tokens, int32_t(blockIdx.x), -1);
  if (chunk.seq < 0) return;
  const auto& shape = args.shape;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t head = blockIdx.y, hk = shape.num_k_heads, hv = shape.num_v_heads;
  const int dk = int(shape.k_dim), dv = int(shape.v_dim), L = chunk.count, dk8 = (dk + 7) / 8 * 8;
  const int64_t key_head = head / (hv / hk), conv_dim = 2 * hk * dk + hv * dv, t0 = chunk.first;
  const int om0 = 16 * (warp % 4), on0 = 64 * (warp / 4);
  const Scratch& scratch = args.scratch;

  // Phase 1's rows, copied all at once (cp.async) and waited for once: S [dk][dv] (zeros past
  // them) and the raw q rows, then each thread scales its own q float4s.
  const float* saved = scratch.states + (int64_t(chunk.index) * hv + head) * dk * dv;
  constexpr int kRowQuads = kMaxDv / 4;  // float4s per row (kMaxDk == kMaxDv)
#pragma unroll
  for (int n = 0; n < kMaxDk * kRowQuads / kThreads; ++n) {
    const int idx = tid + n * kThreads, d = idx / kRowQuads, c = 4 * (idx % kRowQuads);
    const bool valid = d < dk && c < dv;
    copy_16(s_s + d * kOutLd + c, valid ? saved + d * dv + c : saved, valid);
  }
  constexpr int kQCopies = kChunk * kRowQuads / kThreads;
  const float* q_rows = args.conv_out + key_head * dk;
  float q_factor[kQCopies];
#pragma unroll
  for (int n = 0; n < kQCopies; ++n) {
    const int idx = tid + n * kThreads, i = idx / kRowQuads, d = 4 * (idx % kRowQuads);
    const bool valid = i < L && d < dk;
    copy_16(s_q + i * kQLd + d, valid ? q_rows + (t0 + i) * conv_dim + d : q_rows, valid);
    q_factor[n] = valid ? scratch.factors[((t0 + i) * hv + head) * 2] : 0.0f;
  }
  device::cp_async_commit();
  device::cp_async_wait<0>();
#pragma unroll
  for (int n = 0; n < kQCopies; ++n) {
    const int idx = tid + n * kThreads, i = idx / kRowQuads, d = 4 * (idx % kRowQuads);
    float4* q4 = reinterpret_cast<float4*>(&s_q[i * kQLd + d]);
    float4 value = *q4;
    value.x *= q_factor[n];
    value.y *= q_factor[n];
    value.z *= q_factor[n];
    value.w *= q_factor[n];
    *q4 = value;
  }
  __syncthreads();
  float acc[8][4] = {};
  for (int k0 = 0; k0 < dk8; k0 += 8) {
    const Split<4> a = load_a(s_q, kQLd, om0, k0, g, t);
#pragma unroll
    for (int n = 0; n < 8; ++n) mma_xtf32<kTerms>(acc[n], a, load_b(s_s, kOutLd, k0, on0 + 8 * n, g, t));
  }
  __syncthreads();  // phase 2 reuses the shared memory
  // V' rows and attn rows (zeros past the chunk's tokens and past dv), copied at once.
#pragma unroll
  for (int n = 0; n < kChunk * kRowQuads / kThreads; ++n) {
    const int idx = tid + n * kThreads, i = idx / kRowQuads, c = 4 * (idx % kRowQuads);
    const bool valid = i < L && c < dv;
    copy_16(s_v + i * kOutLd + c, valid ? scratch.u + ((t0 + i) * hv + head) * dv + c : scratch.u, valid);
  }
#pragma unroll
  for (int n = 0; n < kChunk * kChunk / 4 / kThreads; ++n) {
    const int idx = tid + n * kThreads, i = idx / (kChunk / 4), j = 4 * (idx % (kChunk / 4));
    const bool valid = i < L;
    copy_16(s_attn + i * kAttnLd + j, valid ? scratch.attn + ((t0 + i) * hv + head) * kChunk + j : scratch.attn,
            valid);
  }
  device::cp_async_commit();
  device::cp_async_wait<0>();
  __syncthreads();
  // attn[i][j] is zero for j > i: this warp's rows need j < om0 + 16 only.
  const int j_end = min(L, om0 + 16);
  for (int j0 = 0; j0 < j_end; j0 += 8) {
    const Split<4> a = load_a(s_attn, kAttnLd, om0, j0, g, t);
#pragma unroll
    for (int n = 0; n < 8; ++n) mma_xtf32<kTerms>(acc[n], a, load_b(s_v, kOutLd, j0, on0 + 8 * n, g, t));
  }
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      store2(&s_o[(om0 + g + 8 * h) * kQLd + on0 + 8 * n + 2 * t], acc[n][2 * h], acc[n][2 * h + 1]);
  __syncthreads();

  // Gated RMSNorm over the head's dv outputs, one warp per row: w * rmsnorm(o) * silu(z).
  const T* projected = static_cast<const T*>(args.projected);
#pragma unroll
  for (int r = 0; r < kOutRows; ++r) {
    const int i = warp * kOutRows + r;
    if (i >= L) break;  // warp-uniform
    const int64_t tok = t0 + i;
    float o[kOutCols];
#pragma unroll
    for (int m = 0; m < kOutCols; ++m) o[m] = s_o[i * kQLd + lane + 32 * m];
    float square = 0.0f;
#pragma unroll
    for (int m = 0; m < kOutCols; ++m)
      if (lane + 32 * m < dv) square += o[m] * o[m];
    const float inv_rms = rsqrtf(device::warp_sum(square) / float(dv) + shape.eps);
    float rounded[kOutCols];
    float absmax = 0.0f;
#pragma unroll
    for (int m = 0; m < kOutCols; ++m) {
      const int c = lane + 32 * m;
      rounded[m] = 0.0f;
      if (c >= dv) continue;
      const float z = device::to_float(projected[tok * args.projected_stride + args.z_offset + head * dv + c]);
      const float normed = args.norm_w[c] * (o[m] * inv_rms) * device::silu(z);
      const T stored = device::from_float<T>(normed);
      static_cast<T*>(args.out)[tok * hv * dv + head * dv + c] = stored;
      rounded[m] = device::to_float(stored);
      absmax = fmaxf(absmax, fabsf(rounded[m]));
    }
    if (args.q_codes) {
      const float scale = fmaxf(device::warp_max(absmax), 1e-10f) / 448.0f;
#pragma unroll
      for (int m = 0; m < kOutCols; ++m) {
        const int c = lane + 32 * m;
        if (c < dv)
          args.q_codes[tok * hv * dv + head * dv + c] =
              __nv_fp8_e4m3(fminf(fmaxf(rounded[m] / scale, -448.0f), 448.0f)).__x;
      }
      if (lane == 0) args.q_scales[tok * hv + head] = scale;
    }
  }
}

// > 48 KB of dynamic shared memory: a per-device function attribute, set once per device and kernel.
template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes, std::atomic<uint64_t>& set_on) {
  int device = 0;
  VT_CUDA_CHECK(cudaGetDevice(&device));
  VT_CHECK(device < 64, "gdn_chunked: device index ", device, " beyond 63");
  if (set_on.load() & (uint64_t(1) << device)) return;
  VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  set_on.fetch_or(uint64_t(1) << device);
}

int64_t round4(int64_t n) { return (n + 3) / 4 * 4; }

}  // namespace

bool gdn_chunked_supports(const DeltaNetShape& shape) {
  return shape.k_dim >= 4 && shape.k_dim <= kMaxDk && shape.k_dim % 4 == 0 && shape.v_dim >= 4 &&
         shape.v_dim <= kMaxDv && shape.v_dim % 4 == 0 && shape.num_k_heads >= 1 && shape.num_v_heads % shape.num_k_heads == 0;
}

int64_t gdn_chunked_max_chunks(int64_t tokens, int64_t seqs, int64_t min_tokens) {
  VT_CHECK(tokens >= 0 && seqs >= 0 && min_tokens >= 1, "gdn_chunked_max_chunks: ", tokens, " tokens, ", seqs,
           " sequences, min_tokens ", min_tokens);
  // sum over the chunked sequences of ceil(len / 64) <= (tokens + 63 * their number) / 64.
  const int64_t chunked_seqs = std::min(seqs, tokens / min_tokens);
  return (tokens + (kGdnChunk - 1) * chunked_seqs) / kGdnChunk;
}

int64_t gdn_chunked_scratch_floats(int64_t tokens, int64_t seqs, int64_t min_tokens, const DeltaNetShape& shape) {
  const int64_t chunks = gdn_chunked_max_chunks(tokens, seqs, min_tokens), hv = shape.num_v_heads;
  return round4(tokens * hv * shape.k_dim) + round4(tokens * hv * shape.v_dim) + round4(tokens * hv * kGdnChunk) +
         round4(tokens * hv * 2) + round4(chunks * hv) + round4(chunks * hv * shape.k_dim * shape.v_dim);
}

void gdn_chunked(const GdnArgs& core, DType act, cudaStream_t stream, float* scratch, int64_t scratch_floats,
                 int64_t min_tokens) {
  const StepLayout& layout = core.layout;
  const DeltaNetShape& shape = core.shape;
  uint8_t* q_codes = core.q_codes;
  VT_CHECK(gdn_chunked_supports(shape), "gdn_chunked: head dims ", shape.k_dim, "/", shape.v_dim, ", heads ",
           shape.num_k_heads, "/", shape.num_v_heads, " (dk a multiple of 4 up to ", kMaxDk, ", dv up to ", kMaxDv,
           ", value heads a multiple of key heads)");
  VT_CHECK(!q_codes || shape.v_dim == 128, "gdn_chunked: fused FP8 output needs v_dim == 128, got ", shape.v_dim);
  VT_CHECK(min_tokens >= 1 && min_tokens <= (int64_t(1) << 30), "gdn_chunked: min_tokens ", min_tokens);
  // The kernels copy rows of conv_out and of the scratch in 16-byte pieces.
  VT_CHECK(reinterpret_cast<uintptr_t>(core.conv_out) % 16 == 0 && reinterpret_cast<uintptr_t>(scratch) % 16 == 0,
           "gdn_chunked: conv_out and the scratch must be 16-byte aligned");
  if (layout.num_seqs == 0 || layout.num_tokens == 0) return;
  const int64_t step_tokens = layout.num_tokens, hv = shape.num_v_heads, dk = shape.k_dim, dv = shape.v_dim;
  const int64_t chunks = gdn_chunked_max_chunks(step_tokens, layout.num_seqs, min_tokens);
  if (chunks == 0) return;  // no sequence is long enough
  const int64_t needed = gdn_chunked_scratch_floats(step_tokens, layout.num_seqs, min_tokens, shape);
  VT_CHECK(scratch && scratch_floats >= needed, "gdn_chunked: scratch of ", scratch_floats, " floats, the step needs ",
           needed);
  VT_CHECK(chunks <= 0x7fffffff && hv <= 65535, "gdn_chunked: ", chunks, " chunks x ", hv, " heads");
  Scratch parts;
  float* next = scratch;
  const auto take = [&next](int64_t floats) {
    float* part = next;
    next += round4(floats);
    return part;
  };
  parts.w = take(step_tokens * hv * dk);
  parts.u = take(step_tokens * hv * dv);
  parts.attn = take(step_tokens * hv * kGdnChunk);
  parts.factors = take(step_tokens * hv * 2);
  parts.decay = take(chunks * hv);
  parts.states = take(chunks * hv * dk * dv);
  const ChunkedArgs args{core, parts, int32_t(min_tokens)};

  // Costs: what each kernel reads and writes (every chunk's tokens counted once; with short
  // sequences mixed in, an upper bound) and its multiply-adds.
  const double tokens = double(step_tokens), element = double(dtype_size(act)), C = double(kGdnChunk);
  const double state_bytes = double(chunks) * double(hv * dk * dv) * 4;
  const ::vt::trace::LaunchCost prepare_cost{
      "cuda",
      {step_tokens, hv, dk, dv},
      tokens * (double(2 * shape.num_k_heads * dk) * 4 + double(hv * dv) * 4 + 2 * double(hv) * element) +
          tokens * double(hv) * (double(dk + dv) + C + 2) * 4,
      tokens * double(hv) * (2.0 * C * double(dk) * 2 + C * double(dk + dv)),
      ::vt::trace::OpGroup::kGdn};
  const ::vt::trace::LaunchCost state_cost{
      "cuda",
      {step_tokens, hv, dk, dv},
      double(layout.num_seqs) * double(hv * dk * dv) * 8 + state_bytes +
          tokens * double(hv) * (double(dk) * 4 + double(dv) * 8 + 4) * double((dv + kStateCols - 1) / kStateCols),
      tokens * double(hv) * double(dk * dv) * 4,
      ::vt::trace::OpGroup::kGdn};
  const ::vt::trace::LaunchCost output_cost{
      "cuda",
      {step_tokens, hv, dk, dv},
      state_bytes + tokens * double(hv) * (double(dk + dv) * 4 + C * 4 + 4 + 2 * double(dv) * element) +
          (q_codes ? tokens * double(hv) * (double(dv) + 4) : 0.0),
      tokens * double(hv) * double(dv) * (2.0 * double(dk) + C),
      ::vt::trace::OpGroup::kGdn};
  const dim3 chunk_grid{unsigned(chunks), unsigned(hv)};
  const dim3 state_grid{unsigned(layout.num_seqs), unsigned(hv), unsigned((dv + kStateCols - 1) / kStateCols)};
  VT_DISPATCH_ACT(act, T, {
    static std::atomic<uint64_t> prepare_shared_set{0}, state_shared_set{0}, output_shared_set{0};
    allow_shared(sm90_gdn_chunk_state<kTermsFor<T>>, kStateShared, state_shared_set);
    allow_shared(sm90_gdn_chunk_prepare<T>, kPrepareShared, prepare_shared_set);
    allow_shared(sm90_gdn_chunk_output<T>, kOutputShared, output_shared_set);
    launch("sm90_gdn_chunk_prepare", prepare_cost, sm90_gdn_chunk_prepare<T>, chunk_grid, dim3(kThreads),
           kPrepareShared, stream, args);
    launch("sm90_gdn_chunk_state", state_cost, sm90_gdn_chunk_state<kTermsFor<T>>, state_grid, dim3(kThreads), kStateShared, stream,
           args);
    launch("sm90_gdn_chunk_output", output_cost, sm90_gdn_chunk_output<T>, chunk_grid, dim3(kThreads), kOutputShared,
           stream, args);
  });
}

}  // namespace vt::cuda
