// Shared pieces of the CUDA-vs-CPU op tests (tests/ops/<op>_cuda_test.cpp): a fixture that skips
// without a GPU (and fails instead when VT_REQUIRE_GPU is set, as on the GPU machine), random host
// vectors, device copies of them, and the relative-L2 comparison; the step layout of several
// sequences that the attention and GDN kernels read.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"

namespace vt::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) {
      if (std::getenv("VT_REQUIRE_GPU")) FAIL() << "VT_REQUIRE_GPU is set but no CUDA device is visible";
      GTEST_SKIP() << "no CUDA device";
    }
  }
};

// ||a - b|| / ||b||; infinite when `a` holds a non-finite value (an unwritten, poisoned element).
inline double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

// `count` values drawn from N(0, scale^2).
inline std::vector<float> random_vector(size_t count, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(count);
  for (auto& v : values) v = normal(rng);
  return values;
}

// Device copy of a host f32 vector, freed at scope exit.
struct DeviceVector {
  explicit DeviceVector(const std::vector<float>& host) : size(host.size()) {
    data = static_cast<float*>(cuda::device_alloc(size * sizeof(float)));
    cuda::copy_to_device(data, host.data(), size * sizeof(float));
  }
  explicit DeviceVector(size_t count) : DeviceVector(std::vector<float>(count, NAN)) {}  // poisoned
  ~DeviceVector() { cuda::device_free(data); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  std::vector<float> to_host() const {
    std::vector<float> host(size);
    cuda::copy_to_host(host.data(), data, size * sizeof(float));
    return host;
  }
  float* data;
  size_t size;
};

// A host vector as a 1-D device buffer of `dtype` (the bytes as they are).
template <typename T>
cuda::DeviceBuffer upload(const std::vector<T>& host, DType dtype) {
  cuda::DeviceBuffer buffer(dtype, {int64_t(host.size())});
  cuda::copy_to_device(buffer.data(), host.data(), host.size() * sizeof(T));
  return buffer;
}

// An f32 device buffer's values.
inline std::vector<float> download(const cuda::DeviceBuffer& buffer) {
  std::vector<float> host(size_t(buffer.shape().numel()));
  cuda::copy_to_host(host.data(), buffer.data(), host.size() * sizeof(float));
  return host;
}

inline std::vector<uint8_t> download_bytes(const cuda::DeviceBuffer& buffer) {
  std::vector<uint8_t> host(buffer.bytes());
  cuda::copy_to_host(host.data(), buffer.data(), host.size());
  return host;
}

// A host f32 vector as act (f32 or bf16) on the device, and back.
inline void upload_as(cuda::DeviceBuffer& buffer, const std::vector<float>& host, DType act) {
  if (act == DType::kF32) {
    cuda::copy_to_device(buffer.data(), host.data(), host.size() * sizeof(float));
    return;
  }
  std::vector<uint16_t> bits(host.size());
  for (size_t i = 0; i < host.size(); ++i) bits[i] = f32_to_bf16(host[i]);
  cuda::copy_to_device(buffer.data(), bits.data(), bits.size() * sizeof(uint16_t));
}
inline std::vector<float> download_as_f32(const cuda::DeviceBuffer& buffer, DType act, size_t count) {
  std::vector<float> host(count);
  if (act == DType::kF32) {
    cuda::copy_to_host(host.data(), buffer.data(), count * sizeof(float));
    return host;
  }
  std::vector<uint16_t> bits(count);
  cuda::copy_to_host(bits.data(), buffer.data(), count * sizeof(uint16_t));
  for (size_t i = 0; i < count; ++i) host[i] = bf16_to_f32(bits[i]);
  return host;
}

// A step of several sequences: each (cached tokens before, new tokens now).
struct StepPlan {
  std::vector<int32_t> cached, fresh;
  int64_t tokens() const {
    int64_t total = 0;
    for (int32_t n : fresh) total += n;
    return total;
  }
};

// The step's layout on the host (ops/step_layout.h's arrays).
struct HostLayout {
  std::vector<int32_t> token_seq, positions, seq_start, slots;
};

inline HostLayout make_layout(const StepPlan& plan) {
  HostLayout layout;
  layout.seq_start.push_back(0);
  for (size_t s = 0; s < plan.fresh.size(); ++s) {
    for (int32_t t = 0; t < plan.fresh[s]; ++t) {
      layout.token_seq.push_back(int32_t(s));
      layout.positions.push_back(plan.cached[s] + t);
    }
    layout.seq_start.push_back(layout.seq_start.back() + plan.fresh[s]);
    layout.slots.push_back(int32_t(plan.fresh.size() - 1 - s));  // slots in reverse: exercises the map
  }
  return layout;
}

}  // namespace vt::testing
