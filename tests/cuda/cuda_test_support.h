// Shared pieces of the model-, engine- and MTP-level CUDA tests: the ops tests' fixture that skips
// without a GPU and relative-L2 comparison (tests/ops/op_cuda_test_support.h), reduced configs, and
// the golden logits files.
#pragma once

#include <fstream>
#include <string>
#include <vector>

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

// A float32 little-endian file (the golden logits) as host floats.
inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<float> values(size_t(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
  return values;
}

}  // namespace vt::testing
