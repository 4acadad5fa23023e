#include "model/linear.h"

#include "core/dtype.h"
#include "ops/gemm/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "ops/ops.h"

namespace vt {

Buffer load_f32(WeightStore& store, const std::string& name, const Shape& shape) {
  TensorView view = store.take(name, shape, {DType::kF32, DType::kBF16, DType::kF16});
  Buffer out(DType::kF32, shape);
  cpu::to_f32(out.f32(), view.data, view.dtype, view.numel());
  return out;
}

Linear Linear::load(WeightStore& store, const std::vector<LinearPart>& parts, int64_t in_features,
                    const LinearLoadOptions& options) {
  int64_t total_rows = 0;
  for (const auto& part : parts) total_rows += part.rows;
  Linear linear;
  linear.weight_ = Buffer(DType::kF32, {total_rows, in_features});
  int64_t row = 0;
  int fp8_parts = 0;
  for (const auto& part : parts) {
    const std::string weight_name = part.name + ".weight";
    const Shape shape{part.rows, in_features};
    float* destination = linear.weight_.f32() + row * in_features;
    const SafetensorsEntry& entry = store.entry(weight_name);
    if (entry.dtype == DType::kF8E4M3) {
      VT_CHECK(options.fp8_checkpoint, store.file_of(weight_name), ": tensor '", weight_name,
               "' is FP8 but config.json has no fp8 quantization_config");
      TensorView weight = store.take(weight_name, shape, {DType::kF8E4M3});
      const Shape scale_shape{(part.rows + options.block_n - 1) / options.block_n,
                              (in_features + options.block_k - 1) / options.block_k};
      TensorView scale = store.take(part.name + ".weight_scale_inv", scale_shape,
                                    {DType::kF32, DType::kBF16, DType::kF16});
      cpu::fp8_block_dequant(destination, weight.as<uint8_t>(), scale.data, scale.dtype, part.rows,
                             in_features, options.block_n, options.block_k);
      ++fp8_parts;
    } else {
      TensorView weight = store.take(weight_name, shape, {DType::kF32, DType::kBF16, DType::kF16});
      cpu::to_f32(destination, weight.data, weight.dtype, weight.numel());
    }
    row += part.rows;
  }
  VT_CHECK(fp8_parts == 0 || fp8_parts == int(parts.size()), "linear '", parts.front().name,
           "': merged parts mix FP8 and unquantised weights");
  linear.format_ = fp8_parts ? WeightFormat::kFp8Block : WeightFormat::kDense;
  linear.quantize_activations_ =
      fp8_parts && options.fp8_activations == Fp8Activations::kQuantized;
  linear.group_ = trace::gemm_group_of_weight(parts.front().name);
  return linear;
}

Linear Linear::from_f32(Buffer weight, WeightFormat format, bool quantize_activations,
                        trace::OpGroup group) {
  Linear linear;
  linear.weight_ = std::move(weight);
  linear.format_ = format;
  linear.quantize_activations_ = quantize_activations;
  linear.group_ = group;
  return linear;
}

void Linear::forward(const TensorView& y, const TensorView& x) const {
  if (!quantize_activations_) {
    ops::matmul_nt(y, x, weight_, false, group_);
  } else {
    Buffer quantized(DType::kF32, x.shape);
    ops::fp8_quant_dequant(quantized, x, 128);
    ops::matmul_nt(y, quantized, weight_, false, group_);
  }
  if (exact_columns_.empty()) return;
  const int64_t k = in_features(), m = x.numel() / k, count = int64_t(exact_columns_.size());
  Buffer picked(DType::kF32, {m, count});
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < count; ++i) picked.f32()[r * count + i] = x.f32()[r * k + exact_columns_[size_t(i)]];
  ops::matmul_nt(y.reshape({m, out_features()}), picked, exact_weight_, true, group_);
}

std::vector<int64_t> largest_columns(const std::vector<double>& sum_squares, int64_t count) {
  VT_CHECK(count >= 0 && count <= int64_t(sum_squares.size()), count, " largest of ", sum_squares.size(), " columns");
  std::vector<int64_t> order(sum_squares.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return sum_squares[size_t(a)] > sum_squares[size_t(b)]; });
  order.resize(size_t(count));
  std::sort(order.begin(), order.end());
  return order;
}

Linear Linear::to_fp8_blocks(const Fp8Quantization& quantization) const {
  const int64_t rows = out_features(), cols = in_features();
  const int64_t block_rows = quantization.block_rows, block_cols = quantization.block_cols;
  VT_CHECK(block_rows >= 1 && block_cols >= 1, "FP8 blocks of ", block_rows, " x ", block_cols);
  VT_CHECK(quantization.exact_columns >= 0 && quantization.exact_columns <= cols, "FP8: ",
           quantization.exact_columns, " exact columns of ", cols);
  Buffer quantized(DType::kF32, {rows, cols});
  const float* w = weight_.view().f32();
  float* q = quantized.view().f32();
  // The exact columns: the largest by norm (ties to the lower index).
  std::vector<char> exact(size_t(cols), 0);
  std::vector<int64_t> exact_columns;
  if (quantization.exact_columns > 0) {
    std::vector<double> norms(size_t(cols), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) norms[size_t(c)] += double(w[r * cols + c]) * double(w[r * cols + c]);
    exact_columns = largest_columns(norms, quantization.exact_columns);
    for (int64_t c : exact_columns) exact[size_t(c)] = 1;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows)
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const int64_t r1 = std::min(rows, r0 + block_rows), c1 = std::min(cols, c0 + block_cols);
      float absmax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          if (!exact[size_t(c)]) absmax = std::max(absmax, std::fabs(w[r * cols + c]));
      const float scale = std::max(absmax, 1e-12f) / kF8E4M3Max;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          q[r * cols + c] =
              exact[size_t(c)]
                  ? 0.0f
                  : f8e4m3_to_f32(f32_to_f8e4m3(std::clamp(w[r * cols + c] / scale, -kF8E4M3Max, kF8E4M3Max))) *
                        scale;
    }
  Linear linear = from_f32(std::move(quantized), WeightFormat::kFp8Block,
                           quantization.activations == Fp8Activations::kQuantized, group_);
  if (!exact_columns.empty()) {
    const int64_t count = int64_t(exact_columns.size());
    linear.exact_weight_ = Buffer(DType::kF32, {rows, count});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < count; ++i)
        linear.exact_weight_.f32()[r * count + i] = w[r * cols + exact_columns[size_t(i)]];
    linear.exact_columns_ = std::move(exact_columns);
  }
  return linear;
}

}  // namespace vt
