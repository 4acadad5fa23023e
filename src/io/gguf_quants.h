// ggml tensor types as stored in GGUF files: block sizes, byte sizes, and dequantisation of the
// types vt reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) into f32,
// bit-exact with ggml's reference dequantisers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vt {

enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22,
  kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30,
  kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39,
};

struct GgmlTypeInfo {
  std::string_view name;   // "Q4_1"
  uint32_t block_size = 0;  // elements per block
  uint32_t block_bytes = 0;  // bytes per block
  bool dequantizable = false;  // vt can turn it into f32
};

// False when `value` names no ggml type vt knows the size of.
bool ggml_type_from_u32(uint32_t value, GgmlType* type);
const GgmlTypeInfo& ggml_type_info(GgmlType type);

// Dequantises `count` elements (a multiple of the block size) stored at `data` into `out`.
// Throws vt::Error for a type vt cannot dequantise.
void dequantize_to_f32(float* out, const uint8_t* data, GgmlType type, int64_t count);

// One row of `count` elements, single-threaded (the parallel driver and tests use it).
void dequantize_row(float* out, const uint8_t* data, GgmlType type, int64_t count);

}  // namespace vt
