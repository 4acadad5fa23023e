#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

namespace vt {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  VT_CHECK(dims.size() <= size_t(kMaxDims), "shape rank ", dims.size(), " exceeds ", kMaxDims);
  rank_ = int(dims.size());
  for (int i = 0; i < rank_; ++i) {
    VT_CHECK(dims[i] >= 0, "negative dimension ", dims[i]);
    dims_[i] = dims[i];
  }
}

int64_t Shape::numel() const {
  int64_t count = 1;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] != 0 && count > (int64_t(1) << 62) / dims_[i]) VT_FAIL("shape ", str(), " overflows");
    count *= dims_[i];
  }
  return count;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string out = "[";
  for (int i = 0; i < rank_; ++i) out += (i ? ", " : "") + std::to_string(dims_[i]);
  return out + "]";
}

float* TensorView::f32() const {
  VT_CHECK(dtype == DType::kF32, "expected an f32 tensor, got ", dtype_name(dtype));
  return static_cast<float*>(data);
}

TensorView TensorView::rows(int64_t begin, int64_t end) const {
  VT_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape[0], "rows [", begin, ", ", end,
           ") out of ", shape.str());
  TensorView out = *this;
  size_t row_bytes = shape[0] == 0 ? 0 : bytes() / size_t(shape[0]);
  out.data = static_cast<char*>(data) + size_t(begin) * row_bytes;
  out.shape[0] = end - begin;
  return out;
}

TensorView TensorView::reshape(const Shape& new_shape) const {
  VT_CHECK(new_shape.numel() == numel(), "cannot reshape ", shape.str(), " to ", new_shape.str());
  TensorView out = *this;
  out.shape = new_shape;
  return out;
}

void Buffer::Free::operator()(void* p) const { std::free(p); }

Buffer::Buffer(DType dtype, const Shape& shape) {
  size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  size_t rounded = (bytes + 63) / 64 * 64;
  void* memory = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  VT_CHECK(memory != nullptr, "out of host memory allocating ", bytes, " bytes for ", shape.str());
  std::memset(memory, 0, rounded == 0 ? 64 : rounded);
  memory_.reset(memory);
  view_ = TensorView{memory, dtype, Device::kCpu, shape};
}

}  // namespace vt
