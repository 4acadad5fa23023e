// Shared pieces of the CUDA tests: a fixture that skips without a GPU (and fails instead when
// VT_REQUIRE_GPU is set, as on the GPU machine), and the relative-L2 comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "runtime/qwen3_5_cuda.h"

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

// A real architecture's layer shapes with only its first `layers` layers (short tests).
inline Qwen35Config reduced_config(const std::string& name, int64_t layers) {
  Qwen35Config config = synthetic_config(name);
  config.num_layers = layers;
  config.layer_types.resize(size_t(layers));
  return config;
}

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

}  // namespace vt::testing
