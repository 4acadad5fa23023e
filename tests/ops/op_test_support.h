// Shared pieces of the CPU op tests (tests/ops/<op>_test.cpp): random f32 tensors and the
// relative-L2 comparison.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include "core/tensor.h"

namespace vt::testing {

// f32 [shape] drawn from N(0, scale^2).
inline Buffer random(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  Buffer buffer(DType::kF32, shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  for (int64_t i = 0; i < buffer.numel(); ++i) buffer.f32()[i] = normal(rng);
  return buffer;
}

inline Buffer copy(const Buffer& source) {
  Buffer out(source.view().dtype, source.shape());
  std::copy(source.f32(), source.f32() + source.numel(), out.f32());
  return out;
}

// ||a - b|| / ||b|| over `count` floats.
inline double relative_l2(const float* a, const float* b, int64_t count) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < count; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

}  // namespace vt::testing
