// Elementwise and small kernels: SwiGLU, embedding gather, row gather, argmax, conversions,
// deterministic random fills (synthetic weights) and the read-bandwidth probe.
#include <cuda_bf16.h>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/device_buffer.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t count) { return unsigned((count + kThreads - 1) / kThreads); }

template <typename T>
__global__ void sm90_silu_mul(T* __restrict__ g_out, const T* __restrict__ g_gate_up, int64_t rows, int64_t n) {
  device::pdl_enter();
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * n) return;
  const int64_t row = index / n, col = index % n;
  const float gate = device::to_float(g_gate_up[row * 2 * n + col]);
  g_out[index] = device::from_float<T>(device::silu(gate) * device::to_float(g_gate_up[row * 2 * n + n + col]));
}

// n % 128 == 0. Grid (rows, n / (8 * kThreads)): each thread 8 consecutive outputs; each
// half-warp one 1x128 group, quantised to e4m3 for the down projection when g_q is set.
template <typename T>
__global__ void __launch_bounds__(kThreads) sm90_silu_mul_quant(T* __restrict__ g_out, const T* __restrict__ g_gate_up,
                                                                uint8_t* __restrict__ g_q, float* __restrict__ g_scales,
                                                                int64_t n) {
  device::pdl_enter();
  const int64_t row = blockIdx.y, chunk = int64_t(blockIdx.x) * kThreads + threadIdx.x, chunks = n / 8;
  const bool active = chunk < chunks;
  float r_y[8];
  if (active) {
    float r_gate[8], r_up[8];
    device::load8(g_gate_up + row * 2 * n + chunk * 8, r_gate);
    device::load8(g_gate_up + row * 2 * n + n + chunk * 8, r_up);
#pragma unroll
    for (int i = 0; i < 8; ++i) r_y[i] = device::round_to(device::silu(r_gate[i]) * r_up[i], g_out);
    device::store8(g_out + row * n + chunk * 8, r_y);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) r_y[i] = 0.0f;
  }
  if (g_q)
    device::quantize8_half_warp(r_y, g_q + row * n + chunk * 8, g_scales + row * (n / 128) + chunk / 16, active,
                                threadIdx.x % 16 == 0);
}

__device__ float load_any(const void* data, int dtype, int64_t i) {
  switch (dtype) {
    case 0: return static_cast<const float*>(data)[i];
    case 1: return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    default: return __half2float(static_cast<const __half*>(data)[i]);
  }
}

int dtype_code(DType dtype) {
  if (dtype == DType::kF32) return 0;
  if (dtype == DType::kBF16) return 1;
  if (dtype == DType::kF16) return 2;
  VT_FAIL("unsupported float dtype ", dtype_name(dtype));
}

template <typename T>
__global__ void sm90_embedding(T* __restrict__ g_out, const int32_t* __restrict__ g_ids, const void* g_table,
                               int table_dtype, int64_t hidden) {
  device::pdl_enter();
  const int64_t row = g_ids[blockIdx.x];
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    g_out[blockIdx.x * hidden + i] = device::from_float<T>(load_any(g_table, table_dtype, row * hidden + i));
}

template <typename T>
__global__ void sm90_gather_rows(T* __restrict__ g_out, const T* __restrict__ g_in, const int32_t* __restrict__ g_index,
                                 int64_t n) {
  device::pdl_enter();
  const int64_t source = g_index[blockIdx.x];
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) g_out[blockIdx.x * n + i] = g_in[source * n + i];
}

// One block per row; each thread keeps its best (value, index), then a fixed-order reduction.
template <typename T>
__global__ void sm90_argmax_rows(int32_t* __restrict__ g_out, const T* __restrict__ g_logits, int64_t vocab) {
  __shared__ float s_value[kThreads];
  __shared__ int32_t s_index[kThreads];
  device::pdl_enter();
  const T* row = g_logits + blockIdx.x * vocab;
  float best = -INFINITY;
  int32_t best_index = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float value = device::to_float(row[i]);
    if (value > best) best = value, best_index = int32_t(i);  // ascending i: first max kept
  }
  s_value[threadIdx.x] = best;
  s_index[threadIdx.x] = best_index;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float other = s_value[threadIdx.x + stride];
      const int32_t other_index = s_index[threadIdx.x + stride];
      if (other > s_value[threadIdx.x] || (other == s_value[threadIdx.x] && other_index < s_index[threadIdx.x])) {
        s_value[threadIdx.x] = other;
        s_index[threadIdx.x] = other_index;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) g_out[blockIdx.x] = s_index[0] == 0x7fffffff ? 0 : s_index[0];
}

__device__ __forceinline__ uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void sm90_fill_random(void* g_data, int dtype, int64_t count, uint64_t seed, float scale, float offset) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const float unit = float(mix(seed * 0x100000001B3ull + uint64_t(i)) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float value = (2.0f * unit - 1.0f) * scale + offset;
    if (dtype == 0) static_cast<float*>(g_data)[i] = value;
    else static_cast<__nv_bfloat16*>(g_data)[i] = __float2bfloat16_rn(value);
  }
}

__global__ void sm90_fill_random_fp8(uint8_t* g_data, int64_t count, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    uint8_t code = uint8_t(mix(seed * 0x100000001B3ull + uint64_t(i)));
    if ((code & 0x7F) == 0x7F) code ^= 0x01;  // never NaN
    g_data[i] = code;
  }
}

template <typename T>
__global__ void sm90_convert(T* __restrict__ g_out, const void* g_in, int in_dtype, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    g_out[i] = device::from_float<T>(load_any(g_in, in_dtype, i));
}

// Reads `count` 16-byte vectors once (the loads kept alive by a sink write that never happens).
// Launched like a model kernel (PDL) by read_bytes it starts once the previous kernel is done; the
// wait is a no-op in measure_read_bandwidth's plain launches.
__global__ void sm90_read_bytes(const uint4* __restrict__ g_data, int64_t count, float* g_sink) {
  device::pdl_enter();
  uint32_t accumulator = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 value = __ldcs(g_data + i);
    accumulator ^= value.x ^ value.y ^ value.z ^ value.w;
  }
  if (accumulator == 0x12345678u) g_sink[0] = 1.0f;
}

// Runs `cycles` SM clock cycles on every SM after the previous kernel (PDL: the next kernel may
// be scheduled while it runs, as behind a decode step's attention or GDN kernels).
__global__ void sm90_stand_in(int64_t cycles, float* g_sink) {
  device::pdl_enter();
  const int64_t start = clock64();
  while (clock64() - start < cycles) {
  }
  if (cycles < 0) g_sink[0] = 1.0f;
}

unsigned grid_stride_blocks(int64_t count) {
  return unsigned(std::min<int64_t>((count + kThreads - 1) / kThreads, 132 * 16));
}

}  // namespace

void silu_mul(void* out, const void* gate_up, int64_t rows, int64_t n, DType act, cudaStream_t stream, uint8_t* q,
              float* q_scales) {
  VT_CHECK(rows >= 0 && rows <= 65535 && n > 0, "silu_mul: rows ", rows, " n ", n);
  VT_CHECK(!q || n % 128 == 0, "silu_mul: fused FP8 output needs n % 128 == 0 (n = ", n, ")");
  if (rows == 0) return;
  const ::vt::profile::LaunchCost cost{"cuda",
                                       {rows, n, 0, 0},
                                       double(rows) * double(n) * 3 * double(dtype_size(act)) +
                                           (q ? double(rows) * double(n) * (1 + 4.0 / 128) : 0),
                                       0,
                                       ::vt::profile::OpGroup::kElementwise};
  if (n % 128 == 0) {
    const dim3 grid(unsigned((n / 8 + kThreads - 1) / kThreads), unsigned(rows));
    VT_DISPATCH_ACT(act, T,
                    launch("sm90_silu_mul_quant", cost, sm90_silu_mul_quant<T>, grid, dim3(kThreads), 0, stream,
                           static_cast<T*>(out), static_cast<const T*>(gate_up), q, q_scales, n));
    return;
  }
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_silu_mul", cost, sm90_silu_mul<T>, dim3(blocks_for(rows * n)), dim3(kThreads), 0, stream,
                         static_cast<T*>(out), static_cast<const T*>(gate_up), rows, n));
}

void silu_mul_f32(float* out, const float* gate_up, int64_t rows, int64_t n, cudaStream_t stream) {
  silu_mul(out, gate_up, rows, n, DType::kF32, stream);
}

void embedding(void* out, DType act, const int32_t* ids, int64_t tokens, const void* table, DType table_dtype,
               int64_t hidden, cudaStream_t stream) {
  if (tokens == 0) return;
  const int code = dtype_code(table_dtype);
  const double row_bytes = double(hidden) * double(dtype_size(table_dtype) + dtype_size(act));
  const ::vt::profile::LaunchCost cost{"cuda", {tokens, hidden, 0, 0}, double(tokens) * row_bytes, 0,
                                       ::vt::profile::OpGroup::kEmbed};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_embedding", cost, sm90_embedding<T>, dim3(unsigned(tokens)), dim3(kThreads), 0, stream,
                         static_cast<T*>(out), ids, table, code, hidden));
}

void gather_rows(void* out, const void* in, const int32_t* index, int64_t count, int64_t n, DType act,
                 cudaStream_t stream) {
  if (count == 0) return;
  const ::vt::profile::LaunchCost cost{"cuda", {count, n, 0, 0}, 2.0 * double(count * n) * double(dtype_size(act)), 0,
                                       ::vt::profile::OpGroup::kOther};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_gather_rows", cost, sm90_gather_rows<T>, dim3(unsigned(count)), dim3(kThreads), 0, stream,
                         static_cast<T*>(out), static_cast<const T*>(in), index, n));
}

void argmax_rows(int32_t* out, const void* logits, int64_t rows, int64_t vocab, DType act, cudaStream_t stream) {
  if (rows == 0) return;
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_argmax_rows",
                         ::vt::profile::LaunchCost{"cuda", {rows, vocab, 0, 0},
                                                   double(rows) * double(vocab) * double(dtype_size(act)), 0,
                                                   ::vt::profile::OpGroup::kSampling},
                         sm90_argmax_rows<T>, dim3(unsigned(rows)), dim3(kThreads), 0, stream, out,
                         static_cast<const T*>(logits), vocab));
}

void fill_random(void* data, DType dtype, int64_t count, uint64_t seed, float scale, float offset, cudaStream_t stream) {
  VT_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "fill_random: f32 or bf16 only");
  if (count == 0) return;
  sm90_fill_random<<<grid_stride_blocks(count), kThreads, 0, stream>>>(data, dtype == DType::kF32 ? 0 : 1, count,
                                                                        seed, scale, offset);
  VT_CUDA_CHECK_LAUNCH("sm90_fill_random");
}

void fill_random_fp8(uint8_t* data, int64_t count, uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  sm90_fill_random_fp8<<<grid_stride_blocks(count), kThreads, 0, stream>>>(data, count, seed);
  VT_CUDA_CHECK_LAUNCH("sm90_fill_random_fp8");
}

void convert(void* out, DType out_dtype, const void* in, DType in_dtype, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  const int code = dtype_code(in_dtype);
  VT_DISPATCH_ACT(out_dtype, T,
                  sm90_convert<T><<<grid_stride_blocks(count), kThreads, 0, stream>>>(static_cast<T*>(out), in,
                                                                                      code, count));
  VT_CUDA_CHECK_LAUNCH("sm90_convert");
}

void read_bytes(const void* data, size_t bytes, int64_t blocks, int threads, float* sink, cudaStream_t stream) {
  VT_CHECK(bytes % 16 == 0 && reinterpret_cast<uintptr_t>(data) % 16 == 0 && blocks > 0 && blocks <= INT32_MAX,
           "read_bytes: 16-byte aligned, whole 16-byte vectors (", bytes, " bytes), blocks ", blocks);
  launch("sm90_read_bytes",
         ::vt::profile::LaunchCost{"cuda", {int64_t(bytes), 0, 0, 0}, double(bytes), 0, ::vt::profile::OpGroup::kOther},
         sm90_read_bytes, dim3(unsigned(blocks)), dim3(unsigned(threads)), 0, stream,
         static_cast<const uint4*>(data), int64_t(bytes / 16), sink);
}

void stand_in_kernel(double microseconds, float* sink, cudaStream_t stream) {
  int device = 0, sms = 0, khz = 0;
  VT_CUDA_CHECK(cudaGetDevice(&device));
  VT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  VT_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  const int64_t cycles = int64_t(microseconds * 1e-3 * double(khz));
  launch("sm90_stand_in", sm90_stand_in, dim3(unsigned(sms)), dim3(128), 0, stream, cycles, sink);
}

double measure_read_bandwidth(size_t bytes) {
  bytes = bytes / 16 * 16;
  DeviceBuffer data(DType::kU8, {int64_t(bytes)});
  DeviceBuffer sink(DType::kF32, {1});
  fill_random_fp8(data.as<uint8_t>(), int64_t(bytes), 1, nullptr);
  cudaEvent_t start, stop;
  VT_CUDA_CHECK(cudaEventCreate(&start));
  VT_CUDA_CHECK(cudaEventCreate(&stop));
  const int64_t vectors = int64_t(bytes / 16);
  const unsigned blocks = 132 * 8;
  float best_ms = 1e30f;
  for (int rep = 0; rep < 6; ++rep) {
    VT_CUDA_CHECK(cudaEventRecord(start));
    sm90_read_bytes<<<blocks, 512>>>(data.as<uint4>(), vectors, sink.as<float>());
    VT_CUDA_CHECK(cudaEventRecord(stop));
    VT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    VT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) best_ms = std::min(best_ms, ms);  // first run warms up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(bytes) / (double(best_ms) * 1e-3) / 1e9;
}

}  // namespace vt::cuda
