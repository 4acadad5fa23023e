// Device discovery, memory helpers and host<->device copies.
#include <cstdio>
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

DeviceMemory device_memory() {
  DeviceMemory memory;
  if (cudaMemGetInfo(&memory.free, &memory.total) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return memory;
}

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", double(bytes) / double(size_t(1) << 30));
  return text;
}

namespace {

std::string free_memory_note() {
  const DeviceMemory memory = device_memory();
  if (memory.total == 0) return "device memory unknown";
  return gib(memory.free) + " free of " + gib(memory.total);
}

}  // namespace

void check_fits(size_t bytes, const std::string& what, const std::string& hint) {
  const DeviceMemory memory = device_memory();
  if (memory.total == 0 || bytes <= memory.free) return;  // unknown: the allocation itself will say
  throw DeviceOutOfMemory(str(what, ": ", gib(bytes), " does not fit (", gib(memory.free), " free of ",
                              gib(memory.total), ")", hint.empty() ? "" : "; ", hint));
}

void* device_alloc(size_t bytes, std::string_view what) {
  void* pointer = nullptr;
  if (bytes == 0) bytes = 16;
  cudaError_t status = cudaMalloc(&pointer, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    const std::string message = str("cudaMalloc of ", gib(bytes), " (", bytes, " bytes)", what.empty() ? "" : " for ",
                                    what, " failed: ", cudaGetErrorString(status), " (", free_memory_note(), ")");
    if (status == cudaErrorMemoryAllocation) throw DeviceOutOfMemory(message);
    VT_FAIL(message);
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

DeviceBuffer::DeviceBuffer(DType dtype, const Shape& shape, std::string_view what) {
  const size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  const std::string described = what.empty() ? str(dtype_name(dtype), " ", shape.str()) : std::string(what);
  view_ = TensorView{device_alloc(bytes, described), dtype, Device::kCuda, shape};
}

DeviceBuffer to_device(const TensorView& host) {
  VT_CHECK(host.device == Device::kCpu, "to_device: source is not host memory");
  DeviceBuffer buffer(host.dtype, host.shape);
  copy_to_device(buffer.data(), host.data, host.bytes());
  return buffer;
}

}  // namespace vt::cuda
