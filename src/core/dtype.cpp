#include "core/dtype.h"

#include "core/threading.h"

#include "core/error.h"

namespace vt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kI8: case DType::kU8: case DType::kBool:
      return 1;
  }
  VT_FAIL("dtype_size: invalid dtype ", int(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF64: return "f64";
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "f8_e4m3";
    case DType::kF8E5M2: return "f8_e5m2";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kI16: return "i16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
  }
  return "invalid";
}

bool dtype_from_safetensors(std::string_view name, DType* dtype) {
  static constexpr std::pair<std::string_view, DType> kNames[] = {
      {"F64", DType::kF64},         {"F32", DType::kF32},         {"F16", DType::kF16},
      {"BF16", DType::kBF16},       {"F8_E4M3", DType::kF8E4M3}, {"F8_E5M2", DType::kF8E5M2},
      {"I64", DType::kI64},         {"I32", DType::kI32},         {"I16", DType::kI16},
      {"I8", DType::kI8},           {"U8", DType::kU8},           {"BOOL", DType::kBool},
  };
  for (const auto& [spelling, value] : kNames) {
    if (name == spelling) {
      *dtype = value;
      return true;
    }
  }
  return false;
}

bool is_float(DType dtype) {
  switch (dtype) {
    case DType::kF64: case DType::kF32: case DType::kF16: case DType::kBF16:
    case DType::kF8E4M3: case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FF;
  if (exponent == 0) {
    if (mantissa == 0) return bits_to_f32(sign);
    // Subnormal: value = mantissa * 2^-24.
    float value = std::ldexp(float(mantissa), -24);
    return sign ? -value : value;
  }
  if (exponent == 31) return bits_to_f32(sign | 0x7F800000 | (mantissa << 13));
  return bits_to_f32(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float value) {
  uint32_t bits = f32_to_bits(value);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  float magnitude = std::fabs(value);
  if (std::isnan(value)) return sign | 0x7E00;
  if (magnitude >= 65520.0f) return sign | 0x7C00;  // rounds to infinity
  if (magnitude < std::ldexp(1.0f, -14)) {
    // Subnormal range: quantum 2^-24, round to nearest even.
    float scaled = magnitude * std::ldexp(1.0f, 24);
    return sign | uint16_t(std::nearbyint(scaled));
  }
  uint32_t abs_bits = bits & 0x7FFFFFFF;
  uint32_t rounded = abs_bits + 0xFFF + ((abs_bits >> 13) & 1);
  return sign | uint16_t(((rounded >> 13) - (112 << 10)));
}

float f8e4m3_to_f32(uint8_t bits) {
  uint32_t sign = bits & 0x80;
  uint32_t exponent = (bits >> 3) & 0xF;
  uint32_t mantissa = bits & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::nanf("");
  float value = exponent == 0 ? std::ldexp(float(mantissa), -9)
                              : std::ldexp(float(8 + mantissa), int(exponent) - 10);
  return sign ? -value : value;
}

uint8_t f32_to_f8e4m3(float value) {
  if (std::isnan(value)) return 0x7F;
  uint8_t sign = std::signbit(value) ? 0x80 : 0;
  float magnitude = std::fmin(std::fabs(value), kF8E4M3Max);
  if (magnitude < std::ldexp(1.0f, -6)) {
    // Subnormals (and zero): quantum 2^-9, round to nearest even.
    int q = int(std::nearbyint(magnitude * 512.0f));
    return sign | uint8_t(q);  // q == 8 is exactly the smallest normal's encoding
  }
  int exponent;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1)
  int e = exponent - 1;               // magnitude in [2^e, 2^(e+1))
  float quantum = std::ldexp(1.0f, e - 3);
  float q = std::nearbyint(magnitude / quantum);  // in [8, 16]
  if (q == 16.0f) {
    q = 8.0f;
    e += 1;
  }
  int biased = e + 7;
  return sign | uint8_t((biased << 3) | (int(q) - 8));
}

float f8e5m2_to_f32(uint8_t bits) { return f16_to_f32(uint16_t(bits) << 8); }

float load_as_f32(const void* data, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kF64: return float(static_cast<const double*>(data)[i]);
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF8E4M3: return f8e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::kF8E5M2: return f8e5m2_to_f32(static_cast<const uint8_t*>(data)[i]);
    default: VT_FAIL("load_as_f32: ", dtype_name(dtype), " is not a float type");
  }
}


namespace cpu {
void to_f32(float* out, const void* in, DType dtype, int64_t count) {
  parallel_for(count, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = load_as_f32(in, dtype, size_t(i));
  });
}
}  // namespace cpu

}  // namespace vt
