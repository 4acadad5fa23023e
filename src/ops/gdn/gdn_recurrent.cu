// Gated DeltaNet kernels: the causal conv1d with rolling state, and one fused kernel per layer
// for the recurrent core (L2-norm, gating, delta-rule update with the state held in registers,
// gated RMSNorm). Token by token within each sequence; no atomics, so results are bit-identical
// run to run. With a rollback window (speculative verification) both also save the state after
// each token; the no-window instantiations are the decode kernels unchanged.
#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "cuda/check.h"
#include "cuda/cluster.cuh"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "ops/gdn/gdn.h"
#include "ops/step_layout.h"

namespace vt::cuda {
namespace {

constexpr int kConvThreads = 128;
constexpr int kMaxConvKernel = 8;
constexpr int kMaxKeyDim = 128;
constexpr int kMaxValueDim = 128;
constexpr int kStateWarps = 4;  // per CTA of sm90_gdn_recurrent: 32 rows of its 32 state columns each
constexpr int kRowsPerWarp = kMaxKeyDim / kStateWarps;
constexpr int kStateThreads = 32 * kStateWarps;
constexpr int kStateMinBlocks = 5;  // CTAs per SM the registers must allow: 96 each
static_assert(kRowsPerWarp == 32 && kMaxKeyDim == 128, "a warp's rows are one element of each lane's q and k");
constexpr int kMaxCopySpans = 64;  // per launch: 1.5 KB of kernel parameters
constexpr int kCopyThreads = 256;

struct CopySpans {
  CopySpan span[kMaxCopySpans];
};

// Grid (sequence, channel block): one thread per channel walks the sequence's tokens.
template <typename T, bool kWindow>
__global__ void sm90_gdn_conv(float* __restrict__ g_out, float* __restrict__ g_state, const T* __restrict__ g_projected,
                              int64_t stride, const float* __restrict__ g_weight, StepLayout layout, int64_t channels,
                              int kernel, GdnWindow window) {
  // The weights (constant) and the channel's state are read before waiting on the previous kernel:
  // only this kernel (of the previous step) writes the state, and when this one starts every
  // kernel before its predecessor has finished (each waits before it triggers). The step's layout
  // is copied in before its first kernel.
  const int64_t channel = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const bool active = channel < channels;
  const int64_t seq = blockIdx.x, history = kernel - 1;
  float* state = g_state + (int64_t(layout.slots[seq]) * channels + channel) * history;
  float r_window[kMaxConvKernel], r_weight[kMaxConvKernel];
  if (active) {
    for (int j = 0; j < kernel; ++j) r_weight[j] = g_weight[channel * kernel + j];
    for (int j = 0; j < history; ++j) r_window[j] = state[j];
  }
  // The wait before the trigger: sm90_gdn_recurrent, which follows, reads its state before its own wait, so every kernel before this one must
  // have finished when it starts.
  device::pdl_wait();
  device::pdl_trigger();
  if (!active) return;
  // This channel's state in the window entry of the sequence's first token; entries are
  // channels * history apart.
  float* saved = nullptr;
  if constexpr (kWindow) {
    const int32_t first = window.first_entry[seq];
    if (first >= 0)
      saved = window.states + ((int64_t(layout.slots[seq]) * window.entries + first) * channels + channel) * history;
  }
  for (int32_t t = layout.seq_start[seq]; t < layout.seq_start[seq + 1]; ++t) {
    r_window[history] = device::to_float(g_projected[t * stride + channel]);
    float sum = 0.0f;
    for (int j = 0; j < kernel; ++j) sum += r_weight[j] * r_window[j];
    g_out[t * channels + channel] = device::silu(sum);
    for (int j = 0; j < history; ++j) r_window[j] = r_window[j + 1];
    if constexpr (kWindow) {
      if (saved) {
        for (int j = 0; j < history; ++j) saved[j] = r_window[j];
        saved += channels * history;
      }
    }
  }
  for (int j = 0; j < history; ++j) state[j] = r_window[j];
}

// Prefill steps: the same conv with the tokens in parallel. Grid (tiles of kConvTokens tokens of
// the step, channel blocks): a thread's kConvTokens + K - 1 inputs are loaded at once (the serial
// walk above waits on one load per token); a token among the first K - 1 of its sequence takes the
// inputs before it from the sequence's conv state. The same products in the same order as the
// walk, so the same bits. The state is left to sm90_gdn_conv_state, after this kernel. kPair: a
// thread takes two adjacent channels (one 4- or 8-byte load and one 8-byte store per row: a warp
// moves 128 B in and 256 B out per row instead of 64 B and 128 B); the launch checks alignment.
constexpr int kConvTokens = 16;

__device__ __forceinline__ float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

template <typename T, int K, int kPair>
__global__ void __launch_bounds__(kConvThreads) sm90_gdn_conv_tokens(float* __restrict__ g_out,
                                                                     const float* __restrict__ g_state,
                                                                     const T* __restrict__ g_projected, int64_t stride,
                                                                     const float* __restrict__ g_weight,
                                                                     StepLayout layout, int64_t channels) {
  static_assert(kPair == 1 || kPair == 2, "one or two channels a thread");
  constexpr int kHistory = K - 1;
  const int64_t channel = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * kPair;
  const bool active = channel < channels;  // kPair 2: channels is even
  float r_weight[kPair][K];
  if (active) {
#pragma unroll
    for (int c = 0; c < kPair; ++c)
#pragma unroll
      for (int j = 0; j < K; ++j) r_weight[c][j] = g_weight[(channel + c) * K + j];
  }
  device::pdl_wait();
  device::pdl_trigger();
  if (!active) return;
  const int64_t t_begin = int64_t(blockIdx.x) * kConvTokens, num_tokens = layout.num_tokens;
  float r_in[kPair][kConvTokens + kHistory];  // the step's rows t_begin - kHistory + i
#pragma unroll
  for (int i = 0; i < kConvTokens + kHistory; ++i) {
    const int64_t t = t_begin - kHistory + i;
    const bool inside = t >= 0 && t < num_tokens;
    if constexpr (kPair == 2) {
      const float2 pair = inside ? load_pair(g_projected + t * stride + channel) : make_float2(0.0f, 0.0f);
      r_in[0][i] = pair.x;
      r_in[1][i] = pair.y;
    } else {
      r_in[0][i] = inside ? device::to_float(g_projected[t * stride + channel]) : 0.0f;
    }
  }
#pragma unroll
  for (int r = 0; r < kConvTokens; ++r) {
    const int64_t t = t_begin + r;
    if (t >= num_tokens) break;
    const int32_t seq = layout.token_seq[t];
    const int64_t first = layout.seq_start[seq];
    float sum[kPair];
#pragma unroll
    for (int c = 0; c < kPair; ++c) {
      sum[c] = 0.0f;
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const int64_t p = t - kHistory + j;  // the input's row; before `first`: the state's
        const float x = p >= first ? r_in[c][r + j]
                                   : g_state[(int64_t(layout.slots[seq]) * channels + channel + c) * kHistory +
                                             (kHistory - (first - p))];
        sum[c] += r_weight[c][j] * x;
      }
    }
    if constexpr (kPair == 2) {
      *reinterpret_cast<float2*>(g_out + t * channels + channel) = make_float2(device::silu(sum[0]), device::silu(sum[1]));
    } else {
      g_out[t * channels + channel] = device::silu(sum[0]);
    }
  }
}

// Grid (sequence, channel block), after sm90_gdn_conv_tokens (which read the old state): each
// sequence's state becomes its last K - 1 inputs (a sequence of fewer tokens keeps the newest of
// its old state before them).
template <typename T, int K>
__global__ void __launch_bounds__(kConvThreads) sm90_gdn_conv_state(float* __restrict__ g_state,
                                                                    const T* __restrict__ g_projected, int64_t stride,
                                                                    StepLayout layout, int64_t channels) {
  constexpr int kHistory = K - 1;
  device::pdl_wait();
  device::pdl_trigger();
  const int64_t channel = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (channel >= channels) return;
  const int64_t seq = blockIdx.x, first = layout.seq_start[seq], end = layout.seq_start[seq + 1];
  float* state = g_state + (int64_t(layout.slots[seq]) * channels + channel) * kHistory;
  float old[kHistory], next[kHistory];
#pragma unroll
  for (int j = 0; j < kHistory; ++j) old[j] = state[j];
#pragma unroll
  for (int j = 0; j < kHistory; ++j) {
    const int64_t p = end - kHistory + j;
    next[j] = p >= first ? device::to_float(g_projected[p * stride + channel]) : old[kHistory - (first - p)];
  }
#pragma unroll
  for (int j = 0; j < kHistory; ++j) state[j] = next[j];
}

struct RecurrentArgs : GdnArgs {
  GdnWindow window;  // read by the kWindow instantiation only
  int32_t chunked_from;  // read by the kSkipChunked instantiation only
  int32_t slices;        // CTAs per value head (the cluster): ceil(dv / 32)
  int32_t seqs_per_cta;  // sequences each cluster walks in turn (seqs_per_cta below)
};

// Cluster (sequence, value head) of `slices` CTAs, CTA (slice) 32 columns of the head's state
// S [dk, dv]: lane c holds column slice * 32 + c, warp w its rows [32 w, 32 w + 32) in registers,
// so a warp reads and writes 128 contiguous bytes per state row, and the four warps' partial dot
// products meet in shared memory. Four CTAs per head at dv = 128 (a 27B step of one token is 192
// CTAs, not 48) with little state each, so the CTAs of an SM are in different phases (loading,
// updating, storing) and the memory system stays busy. The gated RMSNorm's sum over the head (and
// the FP8 output's max) come from all the cluster's outputs, read through distributed shared
// memory and reduced in the same order in every CTA, so results stay bit-identical run to run.
// Each cluster walks seqs_per_cta sequences, the next one's state streaming into shared memory.
// kSkipChunked (prefill steps that also run gdn_chunked): sequences of >= chunked_from tokens exit.
// kFull: dk = dv = 128 (the models'), so every row and column exists and the strides are constant
// (with runtime ones the compiler keeps 32 row addresses for the final stores and spills).
template <typename T, bool kWindow, bool kSkipChunked, bool kFull>
__global__ void __launch_bounds__(kStateThreads, kStateMinBlocks) sm90_gdn_recurrent(RecurrentArgs args) {
  __shared__ float s_partial[2][kStateWarps][32];
  __shared__ float s_qk[kStateWarps][2][32];  // per warp: its rows of the token's normalised q and k
  __shared__ float s_o[2][32];  // this CTA's columns of o, by token parity, for the whole cluster
  // kFull: the next sequence's state slice streams in (cp.async) while this one's is updated.
  constexpr int kStageFloats = kFull ? kMaxKeyDim * 32 : 4;
  __shared__ __align__(16) float s_stage[2][kStageFloats];
  const auto& shape = args.shape;
  const int slices = args.slices, warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int head = int(blockIdx.x) / slices, slice = int(blockIdx.x) % slices;
  const int first_seq = int(blockIdx.y) * args.seqs_per_cta;
  const int end_seq = min(first_seq + args.seqs_per_cta, int(args.layout.num_seqs));
  // 32-bit indices within a head's state and a token's row (fewer registers); 64-bit bases.
  const int hk = int(shape.num_k_heads), hv = int(shape.num_v_heads);
  const int dk = kFull ? kMaxKeyDim : int(shape.k_dim), dv = kFull ? kMaxValueDim : int(shape.v_dim);
  const int key_head = head / (hv / hk), conv_dim = 2 * hk * dk + hv * dv;
  const int column = slice * 32 + lane, row0 = warp * kRowsPerWarp;
  const bool owns_column = column < dv;
  const auto state_of = [&](int seq) {
    return args.recurrent + (int64_t(args.layout.slots[seq]) * hv + head) * int64_t(dk * dv);
  };
  // Rows of the slice are 128 bytes: eight 16-byte copies each, consecutive threads along a row.
  const auto prefetch = [&](int seq, int stage) {
    const float* source = state_of(seq) + slice * 32;
#pragma unroll
    for (int r = 0; r < kMaxKeyDim * 8 / kStateThreads; ++r) {
      const int chunk = int(threadIdx.x) + r * kStateThreads, row = chunk / 8, part = chunk % 8;
      device::copy_async_16(&s_stage[stage][row * 32 + part * 4], source + row * dv + part * 4);
    }
  };

  // The first state is requested before waiting on the previous kernel: only this kernel (of the
  // previous step) writes it, and every kernel before the previous one (sm90_gdn_conv, which waits
  // before it triggers this one) has finished, so the load overlaps the conv kernel's tail. So
  // are the layer's weights.
  if constexpr (kFull) {
    if (first_seq < end_seq) prefetch(first_seq, 0);
    device::cp_async_commit();
  }
  const float a_log = args.a_log[head], dt_bias = args.dt_bias[head];
  // Warp 0 computes the whole head's gated RMSNorm (below): lane c's columns c + 32 m.
  float head_w[kMaxValueDim / 32];
#pragma unroll
  for (int m = 0; m < kMaxValueDim / 32; ++m)
    head_w[m] = warp == 0 && m < slices && 32 * m + lane < dv ? args.norm_w[32 * m + lane] : 0.0f;
  device::pdl_enter();
  const float q_scale = rsqrtf(float(dk));
  const T* ba = static_cast<const T*>(args.ba);
  const T* projected = static_cast<const T*>(args.projected);
  uint32_t exchanges = 0;
  for (int seq = first_seq; seq < end_seq; ++seq) {
    const int stage = (seq - first_seq) & 1;
    if constexpr (kFull) {
      __syncthreads();  // every thread has read the stage the next copy overwrites (two sequences ago)
      if (seq + 1 < end_seq) prefetch(seq + 1, stage ^ 1);
      device::cp_async_commit();  // perhaps empty: the wait below counts groups
      device::cp_async_wait<1>();
      __syncthreads();  // every thread's copies of this sequence's state have landed
    }
    // Prefill steps that also run gdn_chunked: its sequences are not this kernel's (the same in
    // every CTA of the cluster, so the cluster's barriers stay matched).
    if (kSkipChunked && args.layout.seq_start[seq + 1] - args.layout.seq_start[seq] >= args.chunked_from) continue;
    float* state = state_of(seq);
    float r_s[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      if constexpr (kFull)
        r_s[i] = s_stage[stage][(row0 + i) * 32 + lane];
      else
        r_s[i] = owns_column && row0 + i < dk ? state[(row0 + i) * dv + column] : 0.0f;
    }
    // This head's state in the window entry of the sequence's first token; entries are hv*dk*dv apart.
    float* saved = nullptr;
    if constexpr (kWindow) {
      const int32_t first = args.window.first_entry[seq];
      if (first >= 0)
        saved = args.window.states +
                ((int64_t(args.layout.slots[seq]) * args.window.entries + first) * hv + head) * int64_t(dk * dv);
    }
  for (int32_t t = args.layout.seq_start[seq]; t < args.layout.seq_start[seq + 1]; ++t) {
    // The token's inputs first, so their latencies overlap: q and k whole (each warp normalises
    // them itself; lane c holds elements c, c + 32, c + 64, c + 96), this column's v, the head's b
    // and a.
    const float* row = args.conv_out + int64_t(t) * conv_dim;
    float q[kMaxKeyDim / 32], k[kMaxKeyDim / 32];
#pragma unroll
    for (int m = 0; m < kMaxKeyDim / 32; ++m) {
      const int e = lane + 32 * m;
      q[m] = e < dk ? row[key_head * dk + e] : 0.0f;  // rows past dk contribute exact zeros
      k[m] = e < dk ? row[hk * dk + key_head * dk + e] : 0.0f;
    }
    const float v = owns_column ? row[2 * hk * dk + head * dv + column] : 0.0f;
    const T* z_row = projected + int64_t(t) * args.projected_stride + args.z_offset + head * dv;
    float head_z[kMaxValueDim / 32];
#pragma unroll
    for (int m = 0; m < kMaxValueDim / 32; ++m) {
      const int c = 32 * m + lane;
      head_z[m] = warp == 0 && m < slices && c < dv ? device::to_float(z_row[c]) : 0.0f;
    }
    const T* ba_row = ba + int64_t(t) * 2 * hv;
    const float b_in = device::to_float(ba_row[head]);
    const float a_in = device::to_float(ba_row[hv + head]);
    float qq = 0.0f, kk = 0.0f;
#pragma unroll
    for (int m = 0; m < kMaxKeyDim / 32; ++m) {
      qq += q[m] * q[m];
      kk += k[m] * k[m];
    }
    const float q_norm = rsqrtf(device::warp_sum(qq) + 1e-6f), k_norm = rsqrtf(device::warp_sum(kk) + 1e-6f);
    // Row row0 + i of q and k is lane i's element `warp`. (The previous token's reads of s_qk
    // ended before its second __syncthreads.)
    s_qk[warp][0][lane] = (warp == 0 ? q[0] : warp == 1 ? q[1] : warp == 2 ? q[2] : q[3]) * q_norm * q_scale;
    s_qk[warp][1][lane] = (warp == 0 ? k[0] : warp == 1 ? k[1] : warp == 2 ? k[2] : k[3]) * k_norm;
    __syncwarp();
    const float* my_q = s_qk[warp][0];
    const float* my_k = s_qk[warp][1];
    const float beta = device::sigmoid(b_in);
    const float a = a_in + dt_bias;
    const float softplus = a > 20.0f ? a : log1pf(expf(a));
    const float decay = expf(-expf(a_log) * softplus);

    float partial = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      r_s[i] *= decay;
      partial += r_s[i] * my_k[i];
    }
    s_partial[0][warp][lane] = partial;
    __syncthreads();
    float predicted = s_partial[0][0][lane];
#pragma unroll
    for (int w = 1; w < kStateWarps; ++w) predicted += s_partial[0][w][lane];
    const float delta = beta * (v - predicted);
    partial = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      r_s[i] += my_k[i] * delta;
      partial += r_s[i] * my_q[i];
    }
    s_partial[1][warp][lane] = partial;
    __syncthreads();  // s_partial[0] is rewritten by the next token after this
    float o = s_partial[1][0][lane];
#pragma unroll
    for (int w = 1; w < kStateWarps; ++w) o += s_partial[1][w][lane];
    if constexpr (kWindow) {
      if (saved) {
        if (owns_column)
#pragma unroll
          for (int i = 0; i < kRowsPerWarp; ++i)
            if (row0 + i < dk) saved[(row0 + i) * dv + column] = r_s[i];
        saved += hv * dk * dv;
      }
    }
    // Gated RMSNorm over the head's dv outputs: w * rmsnorm(o) * silu(z), and the FP8 codes' scale
    // (the max over the head): each CTA posts its columns of o, and warp 0 of every CTA reads the
    // whole head's (lane c: columns c, c + 32, c + 64, c + 96) and computes all of it in the same
    // order, so the CTAs agree bit for bit; each stores its own columns. A buffer is rewritten two
    // tokens later, after every CTA has passed the barrier between (so has read it).
    float* posted = s_o[exchanges++ & 1];
    if (warp == 0) posted[lane] = o;
    if (slices > 1)
      device::cluster_sync(warp == 0);  // only warp 0 writes what the others read, and reads theirs
    else
      __syncwarp();
    if (warp == 0) {
      float head_o[kMaxValueDim / 32], square_sum = 0.0f;
#pragma unroll
      for (int m = 0; m < kMaxValueDim / 32; ++m) {
        // Columns past dv hold exact zeros (o, the weight and z), so they add nothing.
        head_o[m] = m >= slices ? 0.0f
                    : m == slice ? posted[lane]
                                 : device::load_cluster(device::cluster_address(posted + lane, uint32_t(m)));
        square_sum += head_o[m] * head_o[m];
      }
      const float inverse_rms = rsqrtf(device::warp_sum(square_sum) / float(dv) + shape.eps);
      float mine = 0.0f, absmax = 0.0f;
#pragma unroll
      for (int m = 0; m < kMaxValueDim / 32; ++m) {
        const float rounded =
            device::to_float(device::from_float<T>(head_w[m] * (head_o[m] * inverse_rms) * device::silu(head_z[m])));
        absmax = fmaxf(absmax, fabsf(rounded));
        if (m == slice) mine = rounded;
      }
      const int64_t element = int64_t(t) * hv * dv + head * dv + column;  // hv * dv < 2^31
      if (owns_column) static_cast<T*>(args.out)[element] = device::from_float<T>(mine);
      if (args.q_codes) {
        const float scale = fmaxf(device::warp_max(absmax), 1e-10f) / 448.0f;
        if (owns_column) args.q_codes[element] = __nv_fp8_e4m3(fminf(fmaxf(mine / scale, -448.0f), 448.0f)).__x;
        if (slice == 0 && lane == 0) args.q_scales[int64_t(t) * hv + head] = scale;
      }
    }
  }
    if (owns_column)
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i)
        if (row0 + i < dk) state[(row0 + i) * dv + column] = r_s[i];
  }
  // No CTA leaves while another may still read its posted outputs.
  if (slices > 1) device::cluster_sync(warp == 0);
}

// Grid (span, block): each block copies a strided share of its span, 16 bytes at a time where
// both ends are aligned.
__global__ void __launch_bounds__(kCopyThreads) sm90_copy_spans(CopySpans spans) {
  device::pdl_enter();
  const CopySpan span = spans.span[blockIdx.x];
  const int64_t first = int64_t(blockIdx.y) * blockDim.x + threadIdx.x, step = int64_t(gridDim.y) * blockDim.x;
  int64_t done = 0;
  if ((reinterpret_cast<uintptr_t>(span.dst) | reinterpret_cast<uintptr_t>(span.src)) % 16 == 0) {
    const int64_t vectors = span.count / 4;
    const float4* src = reinterpret_cast<const float4*>(span.src);
    float4* dst = reinterpret_cast<float4*>(span.dst);
    for (int64_t i = first; i < vectors; i += step) dst[i] = src[i];
    done = vectors * 4;
  }
  for (int64_t i = done + first; i < span.count; i += step) span.dst[i] = span.src[i];
}

// Sequences each cluster of sm90_gdn_recurrent walks: the fewest that bring the CTA count (one
// sequence each) down to what the SMs hold at kStateMinBlocks CTAs each, so most CTAs are resident
// from the start and their next state streams in while they update the current one (27B, 132 SMs:
// 1 up to 3 sequences, 5 at 16, 10 at 32). More rows of clusters beat a single wave: at batch 16
// (27B: 192 CTAs per sequence, 660 resident) 5 sequences each is faster than 6 or 8.
int seqs_per_cta(int64_t ctas_per_seq, int64_t seqs) {
  // The SM count, asked once per device (tensor-parallel ranks run on several of one process).
  static std::atomic<int> sms_of[64];
  int device = 0;
  VT_CUDA_CHECK(cudaGetDevice(&device));
  VT_CHECK(device < 64, "gdn_recurrent: device index ", device, " beyond 63");
  int sms = sms_of[device].load();
  if (sms == 0) {
    VT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    sms_of[device].store(sms);
  }
  const int64_t resident = int64_t(sms) * kStateMinBlocks;
  return int(std::max<int64_t>(1, (ctas_per_seq * seqs + resident - 1) / resident));
}

void check_shape(const DeltaNetShape& shape) {
  VT_CHECK(shape.k_dim <= kMaxKeyDim && shape.v_dim <= kMaxValueDim, "gdn: head dims ", shape.k_dim, "/",
           shape.v_dim, " exceed ", kMaxKeyDim, "/", kMaxValueDim);
  VT_CHECK(shape.num_v_heads % shape.num_k_heads == 0, "gdn: value heads not a multiple of key heads");
  VT_CHECK(shape.conv_kernel >= 1 && shape.conv_kernel <= kMaxConvKernel, "gdn: conv kernel ", shape.conv_kernel);
}

void check_window(const GdnWindow& window) {
  VT_CHECK(!window.states || (window.first_entry && window.entries >= 1), "gdn: a rollback window needs its entries");
}

}  // namespace

void gdn_conv(float* conv_out, float* conv_state, const void* projected, int64_t projected_stride,
              const float* conv_weight, const StepLayout& layout, const DeltaNetShape& shape, DType act,
              cudaStream_t stream, const GdnWindow& window, ConvSchedule schedule) {
  check_shape(shape);
  check_window(window);
  if (layout.num_seqs == 0) return;
  const int64_t channels = 2 * shape.num_k_heads * shape.k_dim + shape.num_v_heads * shape.v_dim;
  dim3 grid(unsigned(layout.num_seqs), unsigned((channels + kConvThreads - 1) / kConvThreads));
  // Mixed inputs read, f32 outputs written, each sequence's rolling state read and written (and,
  // with a window, written again after every token: counted as if every sequence kept one).
  const double tokens = double(layout.num_tokens), seqs = double(layout.num_seqs), history = double(shape.conv_kernel - 1);
  const ::vt::trace::LaunchCost cost{"cuda",
                                       {layout.num_tokens, channels, shape.conv_kernel, 0},
                                       tokens * double(channels) * (double(dtype_size(act)) + 4) +
                                           seqs * double(channels) * history * 8 + double(channels * shape.conv_kernel) * 4 +
                                           (window.states ? tokens * double(channels) * history * 4 : 0.0),
                                       2.0 * tokens * double(channels * shape.conv_kernel),
                                       ::vt::trace::OpGroup::kGdn};
  const bool by_token = schedule == ConvSchedule::kTokens ||
                        (schedule == ConvSchedule::kAuto && !window.states && shape.conv_kernel == 4 &&
                         layout.num_tokens > layout.num_seqs);
  if (by_token) {
    VT_CHECK(!window.states, "gdn_conv: the per-token schedule keeps no rollback window");
    VT_CHECK(shape.conv_kernel == 4, "gdn_conv: the per-token schedule is built for a kernel of 4 (the family's), got ",
             shape.conv_kernel);
    const dim3 token_grid(unsigned((layout.num_tokens + kConvTokens - 1) / kConvTokens), grid.y);
    const ::vt::trace::LaunchCost tokens_cost{"cuda",
                                              {layout.num_tokens, channels, shape.conv_kernel, 0},
                                              tokens * double(channels) * (double(dtype_size(act)) + 4) +
                                                  seqs * double(channels) * history * 4 +
                                                  double(channels * shape.conv_kernel) * 4,
                                              2.0 * tokens * double(channels * shape.conv_kernel),
                                              ::vt::trace::OpGroup::kGdn};
    const ::vt::trace::LaunchCost state_cost{"cuda",
                                             {layout.num_seqs, channels, shape.conv_kernel, 0},
                                             seqs * double(channels) * history * (8 + double(dtype_size(act))),
                                             0.0,
                                             ::vt::trace::OpGroup::kGdn};
    // Channel pairs where every row's pair is aligned for one load and one store.
    const bool pairs = channels % 2 == 0 && projected_stride % 2 == 0 &&
                       reinterpret_cast<uintptr_t>(projected) % (2 * dtype_size(act)) == 0 &&
                       reinterpret_cast<uintptr_t>(conv_out) % (2 * sizeof(float)) == 0;
    const dim3 pair_grid(token_grid.x, unsigned((channels / 2 + kConvThreads - 1) / kConvThreads));
    VT_DISPATCH_ACT(act, T, {
      if (pairs)
        launch("sm90_gdn_conv_tokens", tokens_cost, sm90_gdn_conv_tokens<T, 4, 2>, pair_grid, dim3(kConvThreads), 0,
               stream, conv_out, static_cast<const float*>(conv_state), static_cast<const T*>(projected),
               projected_stride, conv_weight, layout, channels);
      else
        launch("sm90_gdn_conv_tokens", tokens_cost, sm90_gdn_conv_tokens<T, 4, 1>, token_grid, dim3(kConvThreads), 0,
               stream, conv_out, static_cast<const float*>(conv_state), static_cast<const T*>(projected),
               projected_stride, conv_weight, layout, channels);
      launch("sm90_gdn_conv_state", state_cost, sm90_gdn_conv_state<T, 4>, grid, dim3(kConvThreads), 0, stream,
             conv_state, static_cast<const T*>(projected), projected_stride, layout, channels);
    });
    return;
  }
  VT_DISPATCH_ACT(act, T, {
    if (window.states)
      launch("sm90_gdn_conv", cost, sm90_gdn_conv<T, true>, grid, dim3(kConvThreads), 0, stream, conv_out, conv_state,
             static_cast<const T*>(projected), projected_stride, conv_weight, layout, channels, int(shape.conv_kernel),
             window);
    else
      launch("sm90_gdn_conv", cost, sm90_gdn_conv<T, false>, grid, dim3(kConvThreads), 0, stream, conv_out,
             conv_state, static_cast<const T*>(projected), projected_stride, conv_weight, layout, channels,
             int(shape.conv_kernel), window);
  });
}

void gdn_recurrent(const GdnArgs& core, DType act, cudaStream_t stream, const GdnWindow& window,
                   int64_t chunked_from, int seqs_per_cluster) {
  const StepLayout& layout = core.layout;
  const DeltaNetShape& shape = core.shape;
  uint8_t* q_codes = core.q_codes;
  check_shape(shape);
  check_window(window);
  VT_CHECK(!q_codes || shape.v_dim == 128, "gdn_recurrent: fused FP8 output needs v_dim == 128, got ", shape.v_dim);
  VT_CHECK(chunked_from >= 0 && chunked_from <= (int64_t(1) << 30), "gdn_recurrent: chunked_from ", chunked_from);
  VT_CHECK(chunked_from == 0 || !window.states,
           "gdn_recurrent: a rollback window saves every token's state: no sequence may go to the chunked kernel");
  if (layout.num_seqs == 0) return;
  RecurrentArgs args{core, window, int32_t(chunked_from), int32_t((shape.v_dim + 31) / 32), 1};
  VT_CHECK(seqs_per_cluster >= 0, "gdn_recurrent: seqs_per_cluster ", seqs_per_cluster);
  args.seqs_per_cta = seqs_per_cluster > 0 ? seqs_per_cluster : seqs_per_cta(shape.num_v_heads * args.slices, layout.num_seqs);
  const int64_t cluster_rows = (layout.num_seqs + args.seqs_per_cta - 1) / args.seqs_per_cta;
  VT_CHECK(cluster_rows <= 65535, "gdn_recurrent: ", layout.num_seqs, " sequences in one step");
  const dim3 grid(unsigned(shape.num_v_heads * args.slices), unsigned(cluster_rows));
  const unsigned cluster = unsigned(args.slices);
  // The recurrent state [dk, dv] f32 of every (sequence, value head) read and written once; per
  // token q, k (f32), v, z, b, a in and the output (and its FP8 codes) out.
  const double tokens = double(layout.num_tokens), element = double(dtype_size(act));
  const double hv = double(shape.num_v_heads), dk = double(shape.k_dim), dv = double(shape.v_dim);
  const ::vt::trace::LaunchCost cost{
      "cuda",
      {layout.num_tokens, shape.num_v_heads, shape.k_dim, shape.v_dim},
      double(layout.num_seqs) * hv * dk * dv * 8 +
          tokens * (double(2 * shape.num_k_heads) * dk * 4 + hv * dv * 4 + hv * dv * element + 2 * hv * element +
                    hv * dv * element + (q_codes ? hv * dv + hv * 4 : 0) + (window.states ? hv * dk * dv * 4 : 0)),
      tokens * hv * dk * dv * 6,
      ::vt::trace::OpGroup::kGdn};
  const bool full = shape.k_dim == kMaxKeyDim && shape.v_dim == kMaxValueDim;
  VT_DISPATCH_ACT(act, T, {
    const auto kernel = window.states       ? (full ? sm90_gdn_recurrent<T, true, false, true>
                                                    : sm90_gdn_recurrent<T, true, false, false>)
                        : chunked_from > 0 ? (full ? sm90_gdn_recurrent<T, false, true, true>
                                                    : sm90_gdn_recurrent<T, false, true, false>)
                                           : (full ? sm90_gdn_recurrent<T, false, false, true>
                                                    : sm90_gdn_recurrent<T, false, false, false>);
    launch_clusters("sm90_gdn_recurrent", cost, kernel, grid, cluster, dim3(kStateThreads), 0, stream, args);
  });
}

void copy_spans(const CopySpan* spans, int64_t num_spans, cudaStream_t stream) {
  for (int64_t begin = 0; begin < num_spans; begin += kMaxCopySpans) {
    const int64_t count = std::min<int64_t>(kMaxCopySpans, num_spans - begin);
    CopySpans chunk{};
    int64_t longest = 0;
    double floats = 0;
    for (int64_t i = 0; i < count; ++i) {
      const CopySpan& span = spans[begin + i];
      VT_CHECK(span.count >= 0 && (span.count == 0 || (span.dst && span.src)), "copy_spans: span ", begin + i,
               " has no memory");
      chunk.span[i] = span;
      longest = std::max(longest, span.count);
      floats += double(span.count);
    }
    if (longest == 0) continue;
    // About 16 float4 per thread of the longest span (a 27B recurrent state: 48 blocks).
    const int64_t blocks = std::clamp<int64_t>((longest / 4 + kCopyThreads * 16 - 1) / (kCopyThreads * 16), 1, 256);
    const ::vt::trace::LaunchCost cost{"cuda", {count, longest, 0, 0}, floats * 8, 0, ::vt::trace::OpGroup::kGdn};
    launch("sm90_copy_spans", cost, sm90_copy_spans, dim3(unsigned(count), unsigned(blocks)), dim3(kCopyThreads), 0,
           stream, chunk);
  }
}

}  // namespace vt::cuda
