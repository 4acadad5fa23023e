// Linear: a weight in its checkpoint format and the way it runs. Models call forward(y, x) and
// never see the format. A Linear may be built from several checkpoint tensors stacked along the
// output dimension (merged projections: GDN qkv+z, attention q+k+v, MLP gate+up).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/weight_store.h"
#include "trace/intent.h"

namespace vt {

enum class WeightFormat { kDense, kFp8Block };

// How FP8 block-scaled weights run on the CPU reference.
enum class Fp8Activations {
  kQuantized,  // W8A8, as the GPU runs it: activations quantised per token in 1x128 groups
  kFloat,      // weight-only: dequantised weights, fp32 activations
};

// How a dense matrix is quantised to FP8 after loading (the output layer: `--lm-head fp8`,
// `vt eval drift`): e4m3 with one scale per block_rows x block_cols block (128 x 128: the
// checkpoints' and the GPU kernels' format; other blocks, down to a scale per row and 128 columns
// or per whole row: the CPU reference only), run W8A8 or weight-only (the CPU reference only).
struct Fp8Quantization {
  Fp8Activations activations = Fp8Activations::kQuantized;
  int64_t block_rows = 128, block_cols = 128;
  // The n input columns of largest norm kept out of FP8: zero in the FP8 matrix (so the blocks'
  // scales come from the rest) and multiplied as stored with the unquantised input, the product
  // added to the FP8 one (the output layer's few large columns carry most of its FP8 drift). The
  // GPU runs it too (a BF16 side product).
  int64_t exact_columns = 0;
  bool gpu_format() const {
    return activations == Fp8Activations::kQuantized && block_rows == 128 && block_cols == 128;
  }
};

// How many input columns `--lm-head fp8` (and `vt eval drift`) keep out of FP8 unless told: 32
// remove most of the drift for no measurable decode time (`vt eval drift` reports it).
constexpr int64_t kDefaultLmHeadExactColumns = 32;

struct LinearLoadOptions {
  bool fp8_checkpoint = false;  // config has an fp8 quantization_config
  int64_t block_n = 128, block_k = 128;
  Fp8Activations fp8_activations = Fp8Activations::kQuantized;
};

// One checkpoint tensor of a (possibly merged) Linear: "<name>.weight", rows of the output.
struct LinearPart {
  std::string name;  // without ".weight"
  int64_t rows;
};

class Linear {
 public:
  Linear() = default;
  // Takes "<part>.weight" (and "<part>.weight_scale_inv" when stored as FP8) for each part.
  static Linear load(WeightStore& store, const std::vector<LinearPart>& parts, int64_t in_features,
                     const LinearLoadOptions& options);
  // A Linear over an f32 matrix [out, in] already in memory (expert slices, permuted weights);
  // `group` says what it serves in profiles (load() takes it from the checkpoint name).
  static Linear from_f32(Buffer weight, WeightFormat format, bool quantize_activations,
                         trace::OpGroup group = trace::OpGroup::kGemmOther);

  // The same matrix quantised to e4m3 in blocks of block_rows x block_cols (scale = absmax / 448 per
  // block, as checkpoints and the CUDA loader do at 128 x 128) and dequantised to f32, run W8A8 or
  // weight-only.
  Linear to_fp8_blocks(const Fp8Quantization& quantization = {}) const;

  // y [M, out] = x [M, in] @ W^T (x quantised per token in 1x128 groups first for W8A8), plus,
  // with exact columns, x [M, exact] @ W [out, exact]^T from the unquantised x.
  void forward(const TensorView& y, const TensorView& x) const;

  // The input columns kept out of FP8 (ascending) and their weights [out, count]: empty unless
  // to_fp8_blocks kept some.
  const std::vector<int64_t>& exact_columns() const { return exact_columns_; }
  const Buffer& exact_weight() const { return exact_weight_; }

  int64_t in_features() const { return weight_.shape()[1]; }
  int64_t out_features() const { return weight_.shape()[0]; }
  WeightFormat format() const { return format_; }
  bool quantizes_activations() const { return quantize_activations_; }
  trace::OpGroup group() const { return group_; }
  const Buffer& weight() const { return weight_; }
  Buffer& mutable_weight() { return weight_; }

 private:
  Buffer weight_;  // f32 [out, in], dequantised on load (the CPU reference computes in fp32)
  WeightFormat format_ = WeightFormat::kDense;
  bool quantize_activations_ = false;
  trace::OpGroup group_ = trace::OpGroup::kGemmOther;
  std::vector<int64_t> exact_columns_;
  Buffer exact_weight_;  // f32 [out, exact_columns_.size()]
};

// The `count` columns of largest sum of squares (ties to the lower index), ascending: which input
// columns an FP8 matrix keeps exact (the CPU reference and the GPU loader choose alike).
std::vector<int64_t> largest_columns(const std::vector<double>& sum_squares, int64_t count);

// Reads a float tensor of the checkpoint into a new f32 buffer of the given shape.
Buffer load_f32(WeightStore& store, const std::string& name, const Shape& shape);

}  // namespace vt
