// Device discovery and memory helpers.
#include "backends/cuda/check.h"
#include "backends/cuda/cuda_ops.h"

namespace vt::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

void* device_alloc(size_t bytes) {
  void* pointer = nullptr;
  VT_CUDA_CHECK(cudaMalloc(&pointer, bytes));
  return pointer;
}

void device_free(void* pointer) { VT_CUDA_CHECK(cudaFree(pointer)); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  VT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  VT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void synchronize() { VT_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace vt::cuda
