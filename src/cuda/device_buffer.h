// Owning device memory (RAII) and the CUDA stream/handle context the CUDA model runs on.
#pragma once

#include <cstddef>
#include <utility>

#include "core/tensor.h"

typedef struct CUstream_st* cudaStream_t;

namespace vt::cuda {

void* device_alloc(size_t bytes);
void device_free(void* pointer);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DType dtype, const Shape& shape);  // uninitialised device memory
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(view_, other.view_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (view_.data) device_free(view_.data);
  }

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: usable as its view
  template <typename T>
  T* as() const { return static_cast<T*>(view_.data); }
  void* data() const { return view_.data; }
  size_t bytes() const { return view_.bytes(); }
  const Shape& shape() const { return view_.shape; }

 private:
  TensorView view_;
};

// Copies a host tensor (any dtype) to a new device buffer of the same dtype and shape.
DeviceBuffer to_device(const TensorView& host);

}  // namespace vt::cuda
