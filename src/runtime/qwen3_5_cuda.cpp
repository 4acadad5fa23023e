#include "runtime/qwen3_5_cuda.h"

namespace vt {

std::unique_ptr<Qwen35CudaModel> load_qwen35_cuda(const std::string& dir, const CudaModelOptions& options) {
  Qwen35CudaCheckpoint checkpoint = load_qwen35_cuda_checkpoint(dir, options);
  return std::make_unique<Qwen35CudaModel>(std::move(checkpoint.config), std::move(checkpoint.weights), options,
                                           std::move(checkpoint.description));
}

std::unique_ptr<Qwen35CudaModel> make_synthetic_cuda_model(const std::string& name, const std::string& weights,
                                                           const CudaModelOptions& options, uint64_t seed) {
  Qwen35CudaCheckpoint checkpoint = synthetic_cuda_checkpoint(name, weights, seed);
  return std::make_unique<Qwen35CudaModel>(std::move(checkpoint.config), std::move(checkpoint.weights), options,
                                           std::move(checkpoint.description));
}

}  // namespace vt
