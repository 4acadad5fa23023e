// Gated DeltaNet kernels: the causal conv1d with rolling state, and one fused kernel per layer
// for the recurrent core (L2-norm, gating, delta-rule update with the state held in registers,
// gated RMSNorm). Token by token within each sequence; no atomics, so results are bit-identical
// run to run.
#include "backends/cuda/check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kConvThreads = 128;
constexpr int kMaxConvKernel = 8;
constexpr int kMaxKeyDim = 128;
constexpr int kMaxValueDim = 128;
constexpr int kSplit = 2;  // threads per state column
constexpr int kRowsPerThread = kMaxKeyDim / kSplit;
constexpr int kStateThreads = kMaxValueDim * kSplit;
static_assert(kStateThreads >= kMaxKeyDim, "one thread per key element when loading q and k");

// Grid (sequence, channel block): one thread per channel walks the sequence's tokens.
template <typename T>
__global__ void sm90_gdn_conv(float* __restrict__ g_out, float* __restrict__ g_state, const T* __restrict__ g_projected,
                              int64_t stride, const float* __restrict__ g_weight, StepLayout layout, int64_t channels,
                              int kernel) {
  device::pdl_enter();
  const int64_t channel = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (channel >= channels) return;
  const int64_t seq = blockIdx.x, history = kernel - 1;
  float* state = g_state + (int64_t(layout.slots[seq]) * channels + channel) * history;
  float r_window[kMaxConvKernel], r_weight[kMaxConvKernel];
  for (int j = 0; j < kernel; ++j) r_weight[j] = g_weight[channel * kernel + j];
  for (int j = 0; j < history; ++j) r_window[j] = state[j];
  for (int32_t t = layout.seq_start[seq]; t < layout.seq_start[seq + 1]; ++t) {
    r_window[history] = device::to_float(g_projected[t * stride + channel]);
    float sum = 0.0f;
    for (int j = 0; j < kernel; ++j) sum += r_weight[j] * r_window[j];
    g_out[t * channels + channel] = device::silu(sum);
    for (int j = 0; j < history; ++j) r_window[j] = r_window[j + 1];
  }
  for (int j = 0; j < history; ++j) state[j] = r_window[j];
}

struct RecurrentArgs {
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

// Block (sequence, value head). Two threads share column j of the state S [dk, dv], each
// holding half its rows in registers; their partial dot products meet through one shuffle.
template <typename T>
__global__ void __launch_bounds__(kStateThreads) sm90_gdn_recurrent(RecurrentArgs args) {
  __shared__ float s_q[kMaxKeyDim], s_k[kMaxKeyDim];
  __shared__ float s_scratch[kStateThreads / 32];
  const auto& shape = args.shape;
  const int64_t seq = blockIdx.x, head = blockIdx.y, tid = threadIdx.x;
  const int64_t j = tid / kSplit, row0 = (tid % kSplit) * kRowsPerThread;
  const int64_t hk = shape.num_k_heads, hv = shape.num_v_heads, dk = shape.k_dim, dv = shape.v_dim;
  const int64_t key_head = head / (hv / hk), conv_dim = 2 * hk * dk + hv * dv;
  const bool owns_column = j < dv;
  float* state = args.recurrent + (int64_t(args.layout.slots[seq]) * hv + head) * dk * dv;

  // The state is read before waiting on the previous kernel: only this kernel (of the previous
  // step) writes it, and every kernel before the previous one has finished (each waits before it
  // triggers its successor), so the state load overlaps the conv kernel's tail.
  const bool first_of_pair = tid % kSplit == 0;
  float r_s[kRowsPerThread];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) r_s[i] = owns_column && row0 + i < dk ? state[(row0 + i) * dv + j] : 0.0f;
  device::pdl_enter();
  if (tid < kMaxKeyDim) s_q[tid] = s_k[tid] = 0.0f;  // rows past dk contribute exact zeros

  const float a_log = args.a_log[head], dt_bias = args.dt_bias[head];
  const float q_scale = rsqrtf(float(dk));
  const T* ba = static_cast<const T*>(args.ba);
  const T* projected = static_cast<const T*>(args.projected);
  for (int32_t t = args.layout.seq_start[seq]; t < args.layout.seq_start[seq + 1]; ++t) {
    const float* row = args.conv_out + int64_t(t) * conv_dim;
    const float q = tid < dk ? row[key_head * dk + tid] : 0.0f;
    const float k = tid < dk ? row[hk * dk + key_head * dk + tid] : 0.0f;
    const float q_norm = rsqrtf(device::block_sum(q * q, s_scratch) + 1e-6f);
    const float k_norm = rsqrtf(device::block_sum(k * k, s_scratch) + 1e-6f);
    if (tid < dk) {
      s_q[tid] = q * q_norm * q_scale;
      s_k[tid] = k * k_norm;
    }
    __syncthreads();
    const float beta = device::sigmoid(device::to_float(ba[int64_t(t) * 2 * hv + head]));
    const float a = device::to_float(ba[int64_t(t) * 2 * hv + hv + head]) + dt_bias;
    const float softplus = a > 20.0f ? a : log1pf(expf(a));
    const float decay = expf(-expf(a_log) * softplus);

    const float v = owns_column ? row[2 * hk * dk + head * dv + j] : 0.0f;
    float predicted = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      r_s[i] *= decay;
      predicted += r_s[i] * s_k[row0 + i];
    }
    predicted += __shfl_xor_sync(0xffffffffu, predicted, 1);
    const float delta = beta * (v - predicted);
    float o = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      r_s[i] += s_k[row0 + i] * delta;
      o += r_s[i] * s_q[row0 + i];
    }
    o += __shfl_xor_sync(0xffffffffu, o, 1);
    // Gated RMSNorm over the head's dv outputs: w * rmsnorm(o) * silu(z).
    const float mean_square = device::block_sum(owns_column && first_of_pair ? o * o : 0.0f, s_scratch) / float(dv);
    float rounded = 0.0f;
    const int64_t element = int64_t(t) * hv * dv + head * dv + j;
    if (owns_column && first_of_pair) {
      const float z = device::to_float(projected[int64_t(t) * args.projected_stride + args.z_offset + head * dv + j]);
      const float normed = args.norm_w[j] * (o * rsqrtf(mean_square + shape.eps)) * device::silu(z);
      const T stored = device::from_float<T>(normed);
      static_cast<T*>(args.out)[element] = stored;
      rounded = device::to_float(stored);
    }
    if (args.q_codes) {
      const float scale = fmaxf(device::block_max(fabsf(rounded), s_scratch), 1e-10f) / 448.0f;
      if (owns_column && first_of_pair)
        args.q_codes[element] = __nv_fp8_e4m3(fminf(fmaxf(rounded / scale, -448.0f), 448.0f)).__x;
      if (tid == 0) args.q_scales[int64_t(t) * hv + head] = scale;
    }
    __syncthreads();  // s_q / s_k are rewritten by the next token
  }
  if (owns_column)
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
      if (row0 + i < dk) state[(row0 + i) * dv + j] = r_s[i];
}

void check_shape(const DeltaNetShape& shape) {
  VT_CHECK(shape.k_dim <= kMaxKeyDim && shape.v_dim <= kMaxValueDim, "gdn: head dims ", shape.k_dim, "/",
           shape.v_dim, " exceed ", kMaxKeyDim, "/", kMaxValueDim);
  VT_CHECK(shape.num_v_heads % shape.num_k_heads == 0, "gdn: value heads not a multiple of key heads");
  VT_CHECK(shape.conv_kernel >= 1 && shape.conv_kernel <= kMaxConvKernel, "gdn: conv kernel ", shape.conv_kernel);
}

}  // namespace

void gdn_conv(float* conv_out, float* conv_state, const void* projected, int64_t projected_stride,
              const float* conv_weight, const StepLayout& layout, const DeltaNetShape& shape, DType act,
              cudaStream_t stream) {
  check_shape(shape);
  if (layout.num_seqs == 0) return;
  const int64_t channels = 2 * shape.num_k_heads * shape.k_dim + shape.num_v_heads * shape.v_dim;
  dim3 grid(unsigned(layout.num_seqs), unsigned((channels + kConvThreads - 1) / kConvThreads));
  // Mixed inputs read, f32 outputs written, each sequence's rolling state read and written.
  const double tokens = double(layout.num_tokens), seqs = double(layout.num_seqs), history = double(shape.conv_kernel - 1);
  const ::vt::profile::LaunchCost cost{"cuda",
                                       {layout.num_tokens, channels, shape.conv_kernel, 0},
                                       tokens * double(channels) * (double(dtype_size(act)) + 4) +
                                           seqs * double(channels) * history * 8 + double(channels * shape.conv_kernel) * 4,
                                       2.0 * tokens * double(channels * shape.conv_kernel),
                                       ::vt::profile::OpGroup::kGdn};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_gdn_conv", cost, sm90_gdn_conv<T>, grid, dim3(kConvThreads), 0, stream, conv_out, conv_state,
                         static_cast<const T*>(projected), projected_stride, conv_weight, layout, channels,
                         int(shape.conv_kernel)));
}

void gdn_recurrent(void* out, float* recurrent, const float* conv_out, const void* projected, int64_t projected_stride,
                   int64_t z_offset, const void* ba, const float* a_log, const float* dt_bias, const float* norm_w,
                   const StepLayout& layout, const DeltaNetShape& shape, DType act, cudaStream_t stream,
                   uint8_t* q_codes, float* q_scales) {
  check_shape(shape);
  VT_CHECK(!q_codes || shape.v_dim == 128, "gdn_recurrent: fused FP8 output needs v_dim == 128, got ", shape.v_dim);
  if (layout.num_seqs == 0) return;
  RecurrentArgs args{out,    recurrent, conv_out, projected, projected_stride, z_offset, ba,
                     a_log,  dt_bias,   norm_w,   layout,    shape,            q_codes,  q_scales};
  dim3 grid(unsigned(layout.num_seqs), unsigned(shape.num_v_heads));
  // The recurrent state [dk, dv] f32 of every (sequence, value head) read and written once; per
  // token q, k (f32), v, z, b, a in and the output (and its FP8 codes) out.
  const double tokens = double(layout.num_tokens), element = double(dtype_size(act));
  const double hv = double(shape.num_v_heads), dk = double(shape.k_dim), dv = double(shape.v_dim);
  const ::vt::profile::LaunchCost cost{
      "cuda",
      {layout.num_tokens, shape.num_v_heads, shape.k_dim, shape.v_dim},
      double(layout.num_seqs) * hv * dk * dv * 8 +
          tokens * (double(2 * shape.num_k_heads) * dk * 4 + hv * dv * 4 + hv * dv * element + 2 * hv * element +
                    hv * dv * element + (q_codes ? hv * dv + hv * 4 : 0)),
      tokens * hv * dk * dv * 6,
      ::vt::profile::OpGroup::kGdn};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_gdn_recurrent", cost, sm90_gdn_recurrent<T>, grid, dim3(kStateThreads), 0, stream, args));
}

}  // namespace vt::cuda
