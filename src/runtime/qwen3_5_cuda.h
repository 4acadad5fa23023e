// The Qwen3.5 family on CUDA: its forward (models/qwen3_5/cuda_model.h) served by the runner, and
// the ways to open one (a checkpoint folder, or a synthetic model at a real architecture's shapes).
#pragma once

#include <memory>
#include <string>

#include "models/qwen3_5/cuda_model.h"
#include "runtime/cuda_runner.h"

namespace vt {

class Qwen35CudaModel final : public CudaRunner {
 public:
  Qwen35CudaModel(Qwen35Config config, CudaWeights weights, const CudaModelOptions& options, std::string description)
      : CudaRunner(std::make_unique<Qwen35CudaForward>(std::move(config), std::move(weights), options,
                                                       std::move(description)),
                   options) {}
  const Qwen35CudaForward& qwen() const { return static_cast<const Qwen35CudaForward&>(model()); }
  const Qwen35Config& config() const { return qwen().config(); }
  const CudaWeights& weights() const { return qwen().weights(); }
  const std::string& gemm_plan() const { return qwen().gemm_plan(); }
};

// Opens a checkpoint folder for CUDA.
std::unique_ptr<Qwen35CudaModel> load_qwen35_cuda(const std::string& dir, const CudaModelOptions& options);
// A synthetic model: `name`'s real architecture (synthetic_config), random weights ("fp8" 128x128
// blocks or "bf16"), described as "NAME (synthetic, WEIGHTS)".
std::unique_ptr<Qwen35CudaModel> make_synthetic_cuda_model(const std::string& name, const std::string& weights,
                                                           const CudaModelOptions& options, uint64_t seed);

}  // namespace vt
