// Shape, TensorView (non-owning) and Buffer (owning host memory). Nothing below the engine
// owns memory through a view; buffers are made at start-up and views are passed down.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace vt {

enum class Device : uint8_t { kCpu, kCuda };

class Shape {
 public:
  static constexpr int kMaxDims = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  // Product of all dims (1 for rank 0). Throws on overflow past 2^62.
  int64_t numel() const;
  std::vector<int64_t> to_vector() const { return {dims_.begin(), dims_.begin() + rank_}; }
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }
  std::string str() const;  // "[2, 3]"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

// A contiguous, row-major view of typed memory on one device.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  Shape shape;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i]; }
  int rank() const { return shape.rank(); }

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  float* f32() const;  // checked: dtype must be f32

  // Rows [begin, end) of the first dimension.
  TensorView rows(int64_t begin, int64_t end) const;
  // Same memory, new shape of the same element count.
  TensorView reshape(const Shape& new_shape) const;
};

// Owning, 64-byte aligned host memory holding one tensor.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, const Shape& shape);  // zero-filled
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: a Buffer is usable as its view
  float* f32() const { return view_.f32(); }
  const Shape& shape() const { return view_.shape; }
  int64_t numel() const { return view_.numel(); }
  bool empty() const { return view_.data == nullptr; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> memory_;
  TensorView view_;
};

}  // namespace vt
