// Owning device memory (RAII) and the CUDA stream/handle context the CUDA model runs on.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"

typedef struct CUstream_st* cudaStream_t;

namespace vt::cuda {

// An allocation of device memory that does not fit; the message names what it was for, its bytes
// and the device's free memory, so that start-up says which setting to lower.
class DeviceOutOfMemory : public Error {
 public:
  using Error::Error;
};

struct DeviceMemory {
  size_t free = 0, total = 0;  // bytes on the current device (cudaMemGetInfo)
};
DeviceMemory device_memory();
std::string gib(size_t bytes);  // "31.2 GiB"

// Throws DeviceOutOfMemory when `bytes` are more than the device has free: "WHAT: 48.0 GiB does
// not fit (31.2 GiB free of 139.7 GiB); HINT". For memory allocated at start-up in one go, so the
// error names the whole and what to lower rather than the piece that happened to fail.
void check_fits(size_t bytes, const std::string& what, const std::string& hint);

// `what`: what the memory is for, named in the error (DeviceOutOfMemory) when it does not fit.
void* device_alloc(size_t bytes, std::string_view what = {});
void device_free(void* pointer);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Uninitialised device memory; a failed allocation names `what` (default: the dtype and shape).
  DeviceBuffer(DType dtype, const Shape& shape, std::string_view what = {});
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
