// Tensor parallelism on the GPUs of one node: rank r holds its slices of the model
// (TensorParallelPlan: its attention and GDN heads, its MLP / expert intermediate channels) on
// CUDA device r and runs on a thread of its own; after each row-parallel projection (o_proj,
// out_proj, down, the MoE combine) an NCCL all-reduce sums the ranks' partials on the rank's
// stream, inside the decode CUDA graphs. Every rank runs the same steps in lockstep with the same
// tokens; rank 0's logits and next tokens are the result (embeddings, norms and lm_head are
// replicated, so every rank holds the same residual stream).
//
// Multi-node uses the same path: NcclCommunicator bootstraps over TCP from a unique id; only the
// handing-out of that id to other processes is missing here (one process drives all its ranks).
//
// Failure: a step's inputs are checked here before any rank starts, so ranks fail together or not
// at all; a rank failing alone inside a step (a CUDA error) leaves the world unusable.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/qwen3_5/tensor_parallel_plan.h"
#include "parallel/nccl_communicator.h"
#include "runtime/qwen3_5_cuda.h"

namespace vt {

class TensorParallelCudaModel final : public Model {
 public:
  // A checkpoint folder split over GPUs 0..world-1 (each rank reads only its slices to the GPU).
  static std::unique_ptr<TensorParallelCudaModel> load(const std::string& dir, int world,
                                                       const CudaModelOptions& options);
  // A synthetic model (synthetic_config) split over `world` GPUs: random weights (FP8 128x128 blocks
  // or BF16) made on each rank's GPU from the same seed, described as `description`.
  static std::unique_ptr<TensorParallelCudaModel> synthetic(const Qwen35Config& config, bool fp8, int world,
                                                            const CudaModelOptions& options, uint64_t seed,
                                                            const std::string& description);
  ~TensorParallelCudaModel() override;

  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const override;
  void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
               const ForwardOptions& options) override;
  void forward_batch(std::span<const BatchItem> items, const TensorView& logits) override;
  // Rank 0 (which holds the whole logits) samples on its GPU; the other ranks run the step.
  bool supports_device_sampling() const override { return true; }
  void forward_batch_sample(std::span<const BatchItem> items, std::span<const RowOutput> rows,
                            std::span<int32_t> tokens, const TensorView& logits) override;
  std::string describe() const override { return description_; }
  void quantize_lm_head_fp8(const Fp8Quantization& quantization = {}) override;

  // As Qwen35CudaModel's, on every rank; rank 0's next tokens.
  void decode_step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                   std::vector<int32_t>* next_tokens, bool use_graph);
  std::vector<float> last_logits(int64_t rows);
  void randomize_state(uint64_t seed);
  // The floor of one step: the bytes the busiest rank moves (every rank reads its own).
  double decode_bytes(int64_t batch, int64_t context) const;
  size_t weight_bytes() const;  // all ranks
  const Qwen35Config& config() const { return config_; }
  const TensorParallelPlan& plan() const { return plan_; }
  int world_size() const { return plan_.world_size(); }
  const Qwen35CudaModel& rank(int index) const { return *ranks_.at(size_t(index)); }

 private:
  class Workers;
  class State;
  TensorParallelCudaModel(Qwen35Config config, int world);
  // Joins the NCCL world and builds each rank's model from weights(rank) on its own thread.
  void build(const std::function<CudaWeights(int rank)>& weights, const CudaModelOptions& options);
  // body(rank) on every rank's thread (its device current); rethrows the first failure.
  void run(const std::function<void(int rank)>& body) const;
  // Checks a batched step's items, then step(rank, that rank's items) on every rank.
  void forward_batch_ranks(std::span<const BatchItem> items,
                           const std::function<void(int rank, std::span<const BatchItem> rank_items)>& step);

  Qwen35Config config_;
  TensorParallelPlan plan_;
  ModelInfo info_;
  std::string description_;
  std::unique_ptr<Workers> workers_;
  std::vector<std::unique_ptr<NcclCommunicator>> communicators_;
  std::vector<std::unique_ptr<Qwen35CudaModel>> ranks_;
};

}  // namespace vt
