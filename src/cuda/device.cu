// Device discovery, memory helpers and host<->device copies.
#include <cstdlib>
#include <string>

#include "cuda/device.h"

#include "cuda/check.h"
#include "cuda/device_buffer.h"

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
  if (bytes == 0) bytes = 16;
  cudaError_t status = cudaMalloc(&pointer, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    VT_FAIL("cudaMalloc of ", bytes, " bytes failed: ", cudaGetErrorString(status));
  }
  return pointer;
}

void device_free(void* pointer) { cudaFree(pointer); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  VT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  VT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void synchronize() { VT_CUDA_CHECK(cudaDeviceSynchronize()); }

DeviceBuffer::DeviceBuffer(DType dtype, const Shape& shape) {
  view_ = TensorView{device_alloc(size_t(shape.numel()) * dtype_size(dtype)), dtype, Device::kCuda, shape};
}

DeviceBuffer to_device(const TensorView& host) {
  VT_CHECK(host.device == Device::kCpu, "to_device: source is not host memory");
  DeviceBuffer buffer(host.dtype, host.shape);
  copy_to_device(buffer.data(), host.data, host.bytes());
  return buffer;
}

}  // namespace vt::cuda
