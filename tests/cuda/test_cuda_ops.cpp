// CUDA kernels against the CPU reference. Skips (visibly) where no GPU is present, as in CI;
// scripts/gpu/cuda_tests.sh runs it on the GPU machine, where a skip is a failure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "../numerics.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cuda/cuda_ops.h"

namespace vt {
namespace {

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) {
      if (std::getenv("VT_REQUIRE_GPU")) FAIL() << "VT_REQUIRE_GPU is set but no CUDA device is visible";
      GTEST_SKIP() << "no CUDA device";
    }
  }
};

std::vector<float> random_vector(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> values(count);
  for (auto& v : values) v = normal(rng);
  return values;
}

// Device copy of a host vector, freed at scope exit.
struct DeviceVector {
  explicit DeviceVector(const std::vector<float>& host) : size(host.size()) {
    data = static_cast<float*>(cuda::device_alloc(size * sizeof(float)));
    cuda::copy_to_device(data, host.data(), size * sizeof(float));
  }
  explicit DeviceVector(size_t count) : DeviceVector(std::vector<float>(count, NAN)) {}  // poisoned
  ~DeviceVector() { cuda::device_free(data); }
  std::vector<float> to_host() const {
    std::vector<float> host(size);
    cuda::copy_to_host(host.data(), data, size * sizeof(float));
    return host;
  }
  float* data;
  size_t size;
};

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;  // an unwritten (poisoned) element
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

TEST_F(CudaOps, RmsNormMatchesCpu) {
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 64}, {7, 5120}, {33, 2048}, {5, 250}}) {
    auto x = random_vector(rows * n, 1 + n), w = random_vector(n, 2 + n);
    std::vector<float> expected(rows * n);
    cpu::rms_norm(expected.data(), x.data(), w.data(), rows, n, 1e-6f, 1.0f);
    DeviceVector d_x(x), d_w(w), d_out(rows * n);
    cuda::rms_norm_f32(d_out.data, d_x.data, d_w.data, rows, n, 1e-6f, 1.0f, nullptr);
    cuda::synchronize();
    EXPECT_LE(relative_l2(d_out.to_host(), expected), 1e-6) << rows << "x" << n;
  }
}

TEST_F(CudaOps, SiluMulMatchesCpu) {
  const int64_t rows = 9, n = 17408;
  auto gate_up = random_vector(rows * 2 * n, 3);
  std::vector<float> expected(rows * n);
  cpu::silu_mul(expected.data(), gate_up.data(), rows, n);
  DeviceVector d_in(gate_up), d_out(rows * n);
  cuda::silu_mul_f32(d_out.data, d_in.data, rows, n, nullptr);
  cuda::synchronize();
  EXPECT_LE(relative_l2(d_out.to_host(), expected), 1e-6);
}

}  // namespace
}  // namespace vt
