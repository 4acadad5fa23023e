// Dequantisation of ggml block formats into f32, following ggml's reference code
// (ggml-quants.c, dequantize_row_*): same block layouts, same float operations in the same order.
#include "io/gguf_quants.h"

#include <cstring>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "core/threading.h"

namespace vt {
namespace {

constexpr int kQK = 32;    // elements per block of the legacy formats (Q4_0 ... Q8_0)
constexpr int kQKK = 256;  // elements per super-block of the k-quants
constexpr const char* kSupported = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K";

float half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(bits);
}

// block_q4_0 {f16 d; u8 qs[16]}: low nibbles are elements 0..15, high nibbles 16..31.
void dequantize_q4_0(float* y, const uint8_t* block) {
  const float d = half(block);
  const uint8_t* qs = block + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = float(int(qs[j] & 0x0F) - 8) * d;
    y[j + kQK / 2] = float(int(qs[j] >> 4) - 8) * d;
  }
}

// block_q4_1 {f16 d; f16 m; u8 qs[16]}
void dequantize_q4_1(float* y, const uint8_t* block) {
  const float d = half(block), m = half(block + 2);
  const uint8_t* qs = block + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = float(qs[j] & 0x0F) * d + m;
    y[j + kQK / 2] = float(qs[j] >> 4) * d + m;
  }
}

// Elements j and j + 16 of a q5 block: four low bits from qs[j], the fifth from bits j and j + 16 of qh.
std::pair<int, int> q5_pair(uint32_t qh, const uint8_t* qs, int j) {
  const int high0 = int(((qh >> j) << 4) & 0x10), high1 = int((qh >> (j + 12)) & 0x10);
  return {(qs[j] & 0x0F) | high0, (qs[j] >> 4) | high1};
}

// block_q5_0 {f16 d; u8 qh[4]; u8 qs[16]}: bit j of qh is the fifth bit of element j.
void dequantize_q5_0(float* y, const uint8_t* block) {
  const float d = half(block);
  uint32_t qh;
  std::memcpy(&qh, block + 2, 4);
  const uint8_t* qs = block + 6;
  for (int j = 0; j < kQK / 2; ++j) {
    const auto [low, high] = q5_pair(qh, qs, j);
    y[j] = float(low - 16) * d;
    y[j + kQK / 2] = float(high - 16) * d;
  }
}

// block_q5_1 {f16 d; f16 m; u8 qh[4]; u8 qs[16]}
void dequantize_q5_1(float* y, const uint8_t* block) {
  const float d = half(block), m = half(block + 2);
  uint32_t qh;
  std::memcpy(&qh, block + 4, 4);
  const uint8_t* qs = block + 8;
  for (int j = 0; j < kQK / 2; ++j) {
    const auto [low, high] = q5_pair(qh, qs, j);
    y[j] = float(low) * d + m;
    y[j + kQK / 2] = float(high) * d + m;
  }
}

// block_q8_0 {f16 d; i8 qs[32]}
void dequantize_q8_0(float* y, const uint8_t* block) {
  const float d = half(block);
  for (int j = 0; j < kQK; ++j) y[j] = float(int8_t(block[2 + j])) * d;
}

// The 6-bit scale and min of sub-block j from the 12 packed bytes of Q4_K / Q5_K.
void scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = uint8_t((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The scales and mins of sub-blocks is and is + 1 of a K-quant block.
struct SubBlockPair {
  float d1, m1, d2, m2;
};
SubBlockPair sub_block_pair(int is, const uint8_t* scales, float d, float dmin) {
  uint8_t scale, min;
  scale_min_k4(is + 0, scales, &scale, &min);
  const float d1 = d * scale, m1 = dmin * min;
  scale_min_k4(is + 1, scales, &scale, &min);
  return {d1, m1, d * scale, dmin * min};
}

// block_q4_K {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}: 8 sub-blocks of 32.
void dequantize_q4_k(float* y, const uint8_t* block) {
  const float d = half(block), dmin = half(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* q = block + 16;
  int is = 0;
  for (int j = 0; j < kQKK; j += 64) {
    const auto [d1, m1, d2, m2] = sub_block_pair(is, scales, d, dmin);
    for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

// block_q5_K {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
void dequantize_q5_k(float* y, const uint8_t* block) {
  const float d = half(block), dmin = half(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* qh = block + 16;
  const uint8_t* ql = block + 48;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < kQKK; j += 64) {
    const auto [d1, m1, d2, m2] = sub_block_pair(is, scales, d, dmin);
    for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 = uint8_t(u1 << 2);
    u2 = uint8_t(u2 << 2);
  }
}

// block_q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 16 sub-blocks of 16.
void dequantize_q6_k(float* y, const uint8_t* block) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = half(block + 208);
  for (int n = 0; n < kQKK; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = int((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * float(sc[is + 0]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

using BlockDequantizer = void (*)(float*, const uint8_t*);

BlockDequantizer block_dequantizer(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return dequantize_q4_0;
    case GgmlType::kQ4_1: return dequantize_q4_1;
    case GgmlType::kQ5_0: return dequantize_q5_0;
    case GgmlType::kQ5_1: return dequantize_q5_1;
    case GgmlType::kQ8_0: return dequantize_q8_0;
    case GgmlType::kQ4_K: return dequantize_q4_k;
    case GgmlType::kQ5_K: return dequantize_q5_k;
    case GgmlType::kQ6_K: return dequantize_q6_k;
    default: return nullptr;
  }
}

struct TypeEntry {
  GgmlType type;
  GgmlTypeInfo info;
};

// Block sizes as ggml's type traits (and gguf-py's GGML_QUANT_SIZES) give them.
constexpr TypeEntry kTypes[] = {
    {GgmlType::kF32, {"F32", 1, 4, true}},         {GgmlType::kF16, {"F16", 1, 2, true}},
    {GgmlType::kQ4_0, {"Q4_0", 32, 18, true}},     {GgmlType::kQ4_1, {"Q4_1", 32, 20, true}},
    {GgmlType::kQ5_0, {"Q5_0", 32, 22, true}},     {GgmlType::kQ5_1, {"Q5_1", 32, 24, true}},
    {GgmlType::kQ8_0, {"Q8_0", 32, 34, true}},     {GgmlType::kQ8_1, {"Q8_1", 32, 40, false}},
    {GgmlType::kQ2_K, {"Q2_K", 256, 84, false}},   {GgmlType::kQ3_K, {"Q3_K", 256, 110, false}},
    {GgmlType::kQ4_K, {"Q4_K", 256, 144, true}},   {GgmlType::kQ5_K, {"Q5_K", 256, 176, true}},
    {GgmlType::kQ6_K, {"Q6_K", 256, 210, true}},   {GgmlType::kQ8_K, {"Q8_K", 256, 292, false}},
    {GgmlType::kIQ2_XXS, {"IQ2_XXS", 256, 66, false}}, {GgmlType::kIQ2_XS, {"IQ2_XS", 256, 74, false}},
    {GgmlType::kIQ3_XXS, {"IQ3_XXS", 256, 98, false}}, {GgmlType::kIQ1_S, {"IQ1_S", 256, 50, false}},
    {GgmlType::kIQ4_NL, {"IQ4_NL", 32, 18, false}}, {GgmlType::kIQ3_S, {"IQ3_S", 256, 110, false}},
    {GgmlType::kIQ2_S, {"IQ2_S", 256, 82, false}}, {GgmlType::kIQ4_XS, {"IQ4_XS", 256, 136, false}},
    {GgmlType::kI8, {"I8", 1, 1, false}},          {GgmlType::kI16, {"I16", 1, 2, false}},
    {GgmlType::kI32, {"I32", 1, 4, false}},        {GgmlType::kI64, {"I64", 1, 8, false}},
    {GgmlType::kF64, {"F64", 1, 8, false}},        {GgmlType::kIQ1_M, {"IQ1_M", 256, 56, false}},
    {GgmlType::kBF16, {"BF16", 1, 2, true}},       {GgmlType::kTQ1_0, {"TQ1_0", 256, 54, false}},
    {GgmlType::kTQ2_0, {"TQ2_0", 256, 66, false}}, {GgmlType::kMXFP4, {"MXFP4", 32, 17, false}},
};

}  // namespace

bool ggml_type_from_u32(uint32_t value, GgmlType* type) {
  for (const auto& entry : kTypes)
    if (uint32_t(entry.type) == value) {
      *type = entry.type;
      return true;
    }
  return false;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  for (const auto& entry : kTypes)
    if (entry.type == type) return entry.info;
  VT_FAIL("ggml type ", uint32_t(type), " is unknown");
}

void dequantize_row(float* out, const uint8_t* data, GgmlType type, int64_t count) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  VT_CHECK(count % info.block_size == 0, "dequantize ", info.name, ": ", count,
           " elements are not a whole number of ", info.block_size, "-element blocks");
  switch (type) {
    case GgmlType::kF32: std::memcpy(out, data, size_t(count) * 4); return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < count; ++i) out[i] = half(data + 2 * i);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, data + 2 * i, 2);
        out[i] = bf16_to_f32(bits);
      }
      return;
    default: break;
  }
  const BlockDequantizer dequantize = block_dequantizer(type);
  if (!dequantize) VT_FAIL("ggml type ", info.name, " cannot be dequantised by vt (supported: ", kSupported, ")");
  const int64_t blocks = count / info.block_size;
  for (int64_t b = 0; b < blocks; ++b) dequantize(out + b * info.block_size, data + b * info.block_bytes);
}

void dequantize_to_f32(float* out, const uint8_t* data, GgmlType type, int64_t count) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  VT_CHECK(info.dequantizable, "ggml type ", info.name, " cannot be dequantised by vt (supported: ", kSupported, ")");
  VT_CHECK(count % info.block_size == 0, "dequantize ", info.name, ": ", count,
           " elements are not a whole number of ", info.block_size, "-element blocks");
  const int64_t blocks = count / info.block_size;
  // Chunks of whole blocks; each runs the single-threaded row routine.
  parallel_for(blocks, 256, [&](int64_t begin, int64_t end) {
    dequantize_row(out + begin * info.block_size, data + begin * info.block_bytes, type,
                   (end - begin) * info.block_size);
  });
}

}  // namespace vt
