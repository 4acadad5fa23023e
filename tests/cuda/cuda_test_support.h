// Shared pieces of the model-, engine- and MTP-level CUDA tests: the ops tests' fixture that skips
// without a GPU and relative-L2 comparison (tests/ops/op_cuda_test_support.h), and reduced configs.
#pragma once

#include <string>

#include "../ops/op_cuda_test_support.h"
#include "runtime/qwen3_5_cuda.h"

namespace vt::testing {

// A real architecture's layer shapes with only its first `layers` layers (short tests).
inline Qwen35Config reduced_config(const std::string& name, int64_t layers) {
  Qwen35Config config = synthetic_config(name);
  config.num_layers = layers;
  config.layer_types.resize(size_t(layers));
  return config;
}

}  // namespace vt::testing
