#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/tensor.h"

namespace vt {
namespace {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  // 1 + 2^-8 is exactly half-way between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  for (uint32_t bits = 0; bits < 0x7C00; ++bits) EXPECT_EQ(f32_to_f16(f16_to_f32(uint16_t(bits))), bits);
}

TEST(DType, F8E4M3EveryCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f8e4m3_to_f32(uint8_t(code))));
      continue;
    }
    float value = f8e4m3_to_f32(uint8_t(code));
    EXPECT_EQ(f32_to_f8e4m3(value), code == 0x80 ? 0x80 : code) << code;
  }
  EXPECT_EQ(f8e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(DType, F8E4M3RoundingAndSaturation) {
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1000.0f)), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(-1000.0f)), -448.0f);
  // Between 1.0 and 1.125 (quantum 1/8): 1.0625 is a tie and goes to even (1.0).
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.0625f)), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.07f)), 1.125f);
  // Rounding up across a binade: 15.9 -> 16.
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(15.9f)), 16.0f);
}

TEST(DType, SafetensorsNames) {
  DType dtype;
  ASSERT_TRUE(dtype_from_safetensors("F8_E4M3", &dtype));
  EXPECT_EQ(dtype, DType::kF8E4M3);
  EXPECT_FALSE(dtype_from_safetensors("F4", &dtype));
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
}

TEST(Tensor, ShapeOverflowIsAnError) {
  Shape huge{int64_t(1) << 40, int64_t(1) << 40};
  EXPECT_THROW(huge.numel(), Error);
  EXPECT_THROW((Shape{-1}), Error);
}

TEST(Tensor, RowsAndReshape) {
  Buffer buffer(DType::kF32, {4, 3});
  for (int i = 0; i < 12; ++i) buffer.f32()[i] = float(i);
  TensorView middle = buffer.view().rows(1, 3);
  EXPECT_EQ(middle.shape, (Shape{2, 3}));
  EXPECT_EQ(middle.f32()[0], 3.0f);
  EXPECT_THROW(buffer.view().rows(2, 5), Error);
  EXPECT_THROW(buffer.view().reshape({5}), Error);
}

}  // namespace
}  // namespace vt
