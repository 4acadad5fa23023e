// A Qwen3.5-family model run tensor-parallel on the CPU over a simulated world: the checkpoint is
// loaded once, cut into W rank models by the TensorParallelPlan, and each forward runs the ranks
// on W threads that meet in an InProcessAllReduce after every row-parallel projection. It is the
// reference the multi-GPU (NCCL) forward is checked against, and it proves the plan: its greedy
// output equals the single-rank model's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/qwen3_5/model.h"
#include "models/qwen3_5/tensor_parallel_plan.h"
#include "parallel/in_process_all_reduce.h"

namespace vt {

class TensorParallelQwen35Model final : public Model {
 public:
  TensorParallelQwen35Model(const std::string& dir, int world_size,
                            const Qwen35LoadOptions& options);

  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const override;
  // Every rank computes the (replicated) lm_head; rank 0's logits are the result.
  void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
               const ForwardOptions& options) override;
  std::string describe() const override;
  void quantize_lm_head_fp8(const Fp8Quantization& quantization = {}) override;
  // Rollback replays each rank's own GDN heads: no collective needed.
  bool supports_rollback() const override { return true; }
  void rollback(SequenceState& state, int64_t length) override;
  void commit(SequenceState& state) override;

  const TensorParallelPlan& plan() const { return plan_; }
  const Qwen35Model& rank(int index) const { return *ranks_.at(size_t(index)); }

 private:
  class State;
  // Runs body(rank) on one thread per rank (rank 0 on the caller's); when one throws, the world is
  // aborted so the others leave their all-reduce, and the first failure in rank order is rethrown.
  void run_ranks(const std::function<void(int rank)>& body);

  Qwen35Config config_;
  WeightStore store_;  // keeps the checkpoint mapped: every rank reads the embeddings in place
  TensorParallelPlan plan_;
  InProcessAllReduce world_;
  std::vector<std::unique_ptr<Qwen35Model>> ranks_;
  ModelInfo info_;
};

}  // namespace vt
