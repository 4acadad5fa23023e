// The floors a GEMM is measured against: a pure read of its weight bytes launched as the model's
// kernels are, the stand-in for the op before it, and the device's read bandwidth.
#include <cuda_runtime.h>
#include <algorithm>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "cuda/launch.cuh"
#include "ops/gemm/gemm.h"

namespace vt::cuda {
namespace {

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

}  // namespace

void read_bytes(const void* data, size_t bytes, int64_t blocks, int threads, float* sink, cudaStream_t stream) {
  VT_CHECK(bytes % 16 == 0 && reinterpret_cast<uintptr_t>(data) % 16 == 0 && blocks > 0 && blocks <= INT32_MAX,
           "read_bytes: 16-byte aligned, whole 16-byte vectors (", bytes, " bytes), blocks ", blocks);
  launch("sm90_read_bytes",
         ::vt::trace::LaunchCost{"cuda", {int64_t(bytes), 0, 0, 0}, double(bytes), 0, ::vt::trace::OpGroup::kOther},
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
