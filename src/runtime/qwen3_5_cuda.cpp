// Opening the Qwen3.5 family on CUDA: a checkpoint folder or a synthetic model, with allocation
// failures named by what they were for.
#include "runtime/qwen3_5_cuda.h"

#include <string>

#include "core/error.h"
#include "cuda/device_buffer.h"

namespace vt {

namespace {

// Runs `make`, naming `what` in front of a device allocation that does not fit, so that start-up
// says whether the weights or the serving memory (cache, step workspace) ran out.
template <typename Make>
auto naming_allocations(const std::string& what, Make make) {
  try {
    return make();
  } catch (const cuda::DeviceOutOfMemory& error) {
    throw cuda::DeviceOutOfMemory(what + ": " + error.what());
  }
}

std::string serving_memory(const CudaModelOptions& options) {
  return str("GPU memory for ", options.max_sequences, " sequences of ", options.max_context, " tokens and steps of ",
             options.max_step_tokens, " tokens");
}

}  // namespace

std::unique_ptr<Qwen35CudaModel> load_qwen35_cuda(const std::string& dir, const CudaModelOptions& options) {
  Qwen35CudaCheckpoint checkpoint =
      naming_allocations("the model's weights (" + dir + ")", [&] { return load_qwen35_cuda_checkpoint(dir, options); });
  return naming_allocations(serving_memory(options), [&] {
    return std::make_unique<Qwen35CudaModel>(std::move(checkpoint.config), std::move(checkpoint.weights), options,
                                             std::move(checkpoint.description));
  });
}

std::unique_ptr<Qwen35CudaModel> make_synthetic_cuda_model(const std::string& name, const std::string& weights,
                                                           const CudaModelOptions& options, uint64_t seed) {
  Qwen35CudaCheckpoint checkpoint = naming_allocations(
      "the model's weights (" + name + ", synthetic)", [&] { return synthetic_cuda_checkpoint(name, weights, seed); });
  return naming_allocations(serving_memory(options), [&] {
    return std::make_unique<Qwen35CudaModel>(std::move(checkpoint.config), std::move(checkpoint.weights), options,
                                             std::move(checkpoint.description));
  });
}

}  // namespace vt
