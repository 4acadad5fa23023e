// What the Qwen3.5 CUDA forward does once rather than per step: the FP8 output layer, the GEMM plan
// (timed at start-up), the decode floor, and the checkpoint / synthetic constructors.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "models/qwen3_5/cuda_model.h"
#include "models/qwen3_5/cuda_workspace.h"
#include "ops/gemm/gemm.h"

namespace vt {

// The output layer quantised on the device to FP8 128x128 blocks (BF16 in published checkpoints),
// its exact_columns input columns of largest norm first taken out (the CPU reference's choice,
// model/linear.h: largest_columns).
void Qwen35CudaForward::convert_lm_head_fp8(int64_t exact_columns) {
  CudaLinear& head = weights_.lm_head;
  VT_CHECK(head.format == WeightFormat::kDense && head.parts.size() == 1, "the LM head is already FP8");
  if (exact_columns > 0) {
    VT_CHECK(cuda::exact_columns_supported(exact_columns) && exact_columns <= head.k, "FP8 lm_head: ",
             exact_columns, " exact columns; the GPU takes a multiple of 8, at most 64 and at most the ", head.k,
             " inputs");
    const DType dtype = head.parts[0].weight.view().dtype;
    const std::vector<int64_t> chosen =
        largest_columns(cuda::column_sum_squares(head.parts[0].weight.data(), dtype, head.n, head.k, stream_),
                        exact_columns);
    const std::vector<int32_t> indices(chosen.begin(), chosen.end());
    head.exact_columns = cuda::DeviceBuffer(DType::kI32, {exact_columns});
    cuda::copy_to_device(head.exact_columns.data(), indices.data(), indices.size() * sizeof(int32_t));
    head.exact_weight = cuda::DeviceBuffer(dtype, {head.n, exact_columns});
    cuda::take_columns(head.exact_weight.data(), head.parts[0].weight.data(), dtype, head.exact_columns.as<int32_t>(),
                       exact_columns, head.n, head.k, stream_);
    head.exact_count = exact_columns;
  }
  CudaLinear::Part fp8;
  fp8.n = head.n;
  fp8.weight = cuda::DeviceBuffer(DType::kU8, {head.n, head.k});
  fp8.scales = cuda::DeviceBuffer(DType::kF32, {(head.n + 127) / 128, (head.k + 127) / 128});
  cuda::fp8_quantize_weight_blocks(fp8.weight.as<uint8_t>(), fp8.scales.as<float>(), head.parts[0].weight.data(),
                                   head.parts[0].weight.view().dtype, head.n, head.k, stream_);
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  head.parts.clear();
  head.parts.push_back(std::move(fp8));
  head.format = WeightFormat::kFp8Block;
}

// The FP8 GEMM registry: every FP8 linear's (n, k) with its instances across layers, tuned at
// start-up (or the built-in rule), and a forced backend refused here if it cannot serve a shape.
void Qwen35CudaForward::setup_fp8_gemms(int64_t max_step_tokens) {
  std::map<std::pair<int64_t, int64_t>, cuda::GemmTuneShape> shapes;
  int64_t widest_k = 0, widest_n = 0;  // widest_n: the layers' (the lm_head's rows go the split way)
  // feeds_norm: a block's output projection (project_branch), whose output may stay as partials.
  const auto add = [&](const CudaLinear& linear, bool feeds_norm = false) {
    if (linear.format != WeightFormat::kFp8Block) return;
    for (const auto& part : linear.parts) {
      auto& shape = shapes[{part.n, linear.k}];
      shape.n = part.n;
      shape.k = linear.k;
      shape.feeds_norm = shape.feeds_norm || (feeds_norm && linear.parts.size() == 1 && linear.exact_count == 0);
      shape.weights.emplace_back(part.weight.as<uint8_t>(), part.scales.as<float>());
      widest_k = std::max(widest_k, linear.k);
      if (&linear != &weights_.lm_head) widest_n = std::max(widest_n, part.n);
    }
  };
  const auto add_layer = [&](const CudaLayer& layer) {
    for (const CudaLinear* linear : {&layer.in_proj, &layer.in_proj_ba, &layer.qkv, &layer.mlp.gate_up,
                                     &layer.moe.shared.gate_up, &layer.moe.shared.down, &layer.moe.shared_gate})
      add(*linear);
    for (const CudaLinear* linear : {&layer.out_proj, &layer.o_proj, &layer.mlp.down}) add(*linear, true);
  };
  for (const auto& layer : weights_.layers) add_layer(layer);
  add(weights_.lm_head);
  if (weights_.mtp) {
    add(weights_.mtp->fc);
    add_layer(weights_.mtp->layer);
  }
  if (shapes.empty()) return;
  const int64_t max_m = std::max(max_step_tokens, options_.max_logit_rows);
  fp8_gemm_ = std::make_unique<cuda::Fp8GemmRegistry>(max_m, widest_k, options_.gemm_exclude, widest_n);
  cuda::fp8_gemm_prepare(stream_);  // before any graph capture on the stream
  std::vector<cuda::GemmTuneShape> list;
  for (auto& [key, shape] : shapes) list.push_back(std::move(shape));
  if (const auto forced = fp8_gemm_->forced()) {
    // wgmma_partials runs the others (and where it does not serve) on wgmma.
    const cuda::GemmBackend serving = *forced == cuda::GemmBackend::kWgmmaPartials ? cuda::GemmBackend::kWgmma : *forced;
    for (const auto& shape : list)
      for (int64_t m : {int64_t(1), max_m})
        VT_CHECK(fp8_gemm_->supports(serving, m, shape.n, shape.k, shape.n, options_.activations),
                 "the forced GEMM backend ", cuda::gemm_backend_name(*forced),
                 " (VT_GEMM_BACKEND) cannot serve the ", shape.n, " x ", shape.k,
                 " FP8 GEMM at M = ", m, "; unset it or pick a backend that can");
  }
  if (options_.tune_gemms) {
    gemm_plan_ = fp8_gemm_->tune(list, std::min<int64_t>(max_m, 128), options_.activations, stream_);
    std::fputs(gemm_plan_.c_str(), stderr);
  }
}

double Qwen35CudaForward::decode_bytes(int64_t batch, int64_t context) const {
  const auto& c = config_;
  double bytes = double(weights_.bytes());
  // MoE: only the experts a step routes to are read (a folded shared expert, stacked as one more,
  // always is: E - expected of the E (+ 1) stacked stay unread).
  for (const auto& layer : weights_.layers)
    if (layer.is_moe) bytes -= double(layer.moe.expert_bytes()) * (double(layer.moe.experts) - expected_experts(batch));
  double per_sequence = 0;
  const double act = double(dtype_size(options_.activations));
  for (LayerKind kind : c.layer_types) {
    if (kind == LayerKind::kLinearAttention) {
      per_sequence += 2.0 * 4 * c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim;  // state r+w
      per_sequence += 2.0 * 4 * c.conv_dim() * (c.linear_conv_kernel - 1);
    } else {
      per_sequence += 2.0 * act * double(context) * c.num_kv_heads * c.head_dim;  // K and V read
    }
  }
  return bytes + double(batch) * per_sequence;
}

void Qwen35CudaForward::quantize_lm_head_fp8(const Fp8Quantization& quantization) {
  VT_CHECK(quantization.gpu_format(), "FP8 lm_head on the GPU: 128x128 blocks run W8A8 only (weight-only and "
           "other block shapes are the CPU reference's, for `vt eval drift`)");
  convert_lm_head_fp8(quantization.exact_columns);
  setup_fp8_gemms(workspace_->max_tokens);
}

double Qwen35CudaForward::expected_experts(int64_t tokens) const {
  const double e = double(config_.num_experts), k = double(config_.num_experts_per_tok);
  return e > 0 ? e * (1.0 - std::pow(1.0 - k / e, double(tokens))) : 0.0;
}

Qwen35CudaCheckpoint synthetic_cuda_checkpoint(const std::string& name, const std::string& weights, uint64_t seed) {
  VT_CHECK(weights == "fp8" || weights == "bf16", "synthetic weights: expected fp8 or bf16, got '", weights, "'");
  Qwen35Config config = synthetic_config(name);
  CudaWeights synthetic = synthetic_cuda_weights(config, weights == "fp8", seed);
  return {std::move(config), std::move(synthetic), name + " (synthetic, " + weights + ")"};
}

Qwen35CudaCheckpoint load_qwen35_cuda_checkpoint(const std::string& dir, const CudaModelOptions& options) {
  Qwen35Config config = parse_qwen35_config(dir + "/config.json");
  WeightStore store = WeightStore::open(dir);
  CudaWeights weights = load_cuda_weights(store, config, options.activations, nullptr, 0, options.load_mtp);
  std::ostringstream description;
  description << "architecture: " << config.architecture << " on CUDA, activations "
              << dtype_name(options.activations) << ", " << weights.bytes() << " weight bytes";
  if (weights.mtp) description << " (+ " << weights.mtp->bytes() << " of the MTP head)";
  description << "\n";
  return {std::move(config), std::move(weights), description.str()};
}

}  // namespace vt
