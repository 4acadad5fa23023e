// Kernel launches with programmatic dependent launch (PDL): the next kernel of the stream may be
// scheduled while this one drains, and waits in pdl_wait() (common.cuh) for its inputs. This
// hides most of the ~1-2 us gap between the ~1,000 small kernels of a decode step, in CUDA
// graphs too. Every kernel launched here must call pdl_wait() before touching memory an earlier
// kernel writes or reads.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "cuda/check.h"

namespace vt::cuda {

// Kernels with more than 48 KB of dynamic shared memory must say so on each device, once per
// instantiation (tensor-parallel ranks launch them on several GPUs of one process): `devices`
// (one static per instantiation) remembers where, a bit per device index.
template <typename Kernel>
void allow_dynamic_shared(Kernel kernel, size_t bytes, std::atomic<uint64_t>& devices, const char* name) {
  int device = 0;
  VT_CUDA_CHECK(cudaGetDevice(&device));
  VT_CHECK(device < 64, name, ": device index ", device, " beyond 63");
  if (devices.load() & (uint64_t(1) << device)) return;
  VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  devices.fetch_or(uint64_t(1) << device);
}

// A launch's configuration: PDL, and thread block clusters of `cluster` CTAs along x
// where cluster > 1 (the grid's x a multiple of it).
struct LaunchConfig {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attributes[2] = {};
  LaunchConfig(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, unsigned cluster = 1) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    config.attrs = attributes;
    attributes[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[config.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
    if (cluster > 1) {
      attributes[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
      attributes[config.numAttrs++].val.clusterDim = {cluster, 1, 1};
    }
  }
  LaunchConfig(const LaunchConfig&) = delete;  // config.attrs points into this object
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

template <typename... Params, typename... Args>
void launch_only(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                 Args&&... args) {
  LaunchConfig launch(grid, block, shared_bytes, stream);
  VT_CUDA_CHECK(cudaLaunchKernelEx(&launch.config, kernel, static_cast<Params>(args)...));
}

// Launches and records the intent to run `name`.
template <typename... Params, typename... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t stream, Args&&... args) {
  launch_only(kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
  ::vt::trace::intend(name);
}

// The same, with what the launch costs (bytes it must move, FLOPs, backend, shape): the op and
// group come from the model's trace::OpScope.
template <typename... Params, typename... Args>
void launch(const char* name, const ::vt::trace::LaunchCost& cost, void (*kernel)(Params...), dim3 grid, dim3 block,
            size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  launch_only(kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
  ::vt::trace::intend(name, cost);
}

// The same, in thread block clusters of `cluster` CTAs along x.
template <typename... Params, typename... Args>
void launch_clusters(const char* name, const ::vt::trace::LaunchCost& cost, void (*kernel)(Params...), dim3 grid,
                     unsigned cluster, dim3 block, size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  LaunchConfig launch(grid, block, shared_bytes, stream, cluster);
  VT_CUDA_CHECK(cudaLaunchKernelEx(&launch.config, kernel, static_cast<Params>(args)...));
  ::vt::trace::intend(name, cost);
}

}  // namespace vt::cuda
