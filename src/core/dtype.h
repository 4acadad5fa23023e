// Element types vt stores and computes with, and scalar conversions between them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace vt {

enum class DType : uint8_t { kF64, kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kI64, kI32, kI16, kI8, kU8, kBool };

size_t dtype_size(DType dtype);
// Short lower-case name ("bf16", "f8_e4m3").
std::string_view dtype_name(DType dtype);
// Safetensors spelling ("BF16", "F8_E4M3"); false when the string names no known dtype.
bool dtype_from_safetensors(std::string_view name, DType* dtype);
bool is_float(DType dtype);

// ---- scalar conversions (bit-exact with PyTorch's) ----

inline float bits_to_f32(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
inline uint32_t f32_to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

inline float bf16_to_f32(uint16_t bits) { return bits_to_f32(uint32_t(bits) << 16); }

// Round to nearest even, NaN kept quiet (as torch's c10::BFloat16).
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits = f32_to_bits(value);
  if (std::isnan(value)) return 0x7FC0;
  uint32_t rounding_bias = 0x7FFF + ((bits >> 16) & 1);
  return uint16_t((bits + rounding_bias) >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

// E4M3 "fn" variant: no infinities, 0x7F/0xFF are NaN, max finite 448.
float f8e4m3_to_f32(uint8_t bits);
// Round to nearest even; values beyond +-448 saturate to +-448 (callers scale first).
uint8_t f32_to_f8e4m3(float value);
float f8e5m2_to_f32(uint8_t bits);

constexpr float kF8E4M3Max = 448.0f;

// Reads element i of a buffer of any float dtype as f32.
float load_as_f32(const void* data, DType dtype, size_t i);

namespace cpu {
// Converts `count` values of any float dtype to f32 (multi-threaded).
void to_f32(float* out, const void* in, DType dtype, int64_t count);
}  // namespace cpu

}  // namespace vt
