// Tensor parallelism on two GPUs (NCCL): the golden tiny models split in two give the tokens and
// (f32) logits of one GPU and of HF transformers, through single-sequence forwards and through
// batched engine steps replayed from CUDA graphs that contain the all-reduces; the real 27B layer
// shapes in FP8 run split in two. Skips with fewer than two GPUs (unless none: VT_REQUIRE_GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../numerics.h"
#include "cuda/check.h"
#include "cuda_test_support.h"
#include "io/json_config.h"
#include "model/generate.h"
#include "parallel/tensor_parallel_cuda_model.h"

namespace vt {
namespace {

const std::string kGolden = std::string(VT_SOURCE_DIR) + "/tests/golden/";

class TensorParallelCuda : public testing::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    int devices = 0;
    VT_CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices < 2) GTEST_SKIP() << "needs two GPUs, " << devices << " visible";
  }
};

CudaModelOptions golden_options() {
  CudaModelOptions options;
  options.activations = DType::kF32;
  options.max_sequences = 3;
  options.max_context = 256;
  options.max_step_tokens = 256;
  options.max_logit_rows = 256;
  return options;
}

std::vector<float> all_logits(Model& model, const std::vector<int32_t>& ids) {
  auto state = model.new_sequence(int64_t(ids.size()));
  Buffer logits(DType::kF32, {int64_t(ids.size()), model.info().vocab_size});
  ForwardOptions all;
  all.all_logits = true;
  model.forward(ids, *state, logits, all);
  return {logits.f32(), logits.f32() + logits.numel()};
}

// Dense, MoE (experts split inside) and Qwen3-Next (its in_proj row order) at TP = 2.
TEST_F(TensorParallelCuda, GoldenTwoRanksGiveOneRanksTokensAndLogits) {
  for (const char* name : {"qwen3_5_dense", "qwen3_5_moe", "qwen3_next"}) {
    SCOPED_TRACE(name);
    const std::string dir = kGolden + name;
    auto single = load_qwen35_cuda(dir, golden_options());
    auto split = TensorParallelCudaModel::load(dir, 2, golden_options());
    EXPECT_NE(split->describe().find("rank 1"), std::string::npos) << split->describe();
    const nlohmann::json reference = read_json_file(dir + "/reference.json");
    for (const auto& prompt : reference["prompts"]) {
      const auto ids = prompt["ids"].get<std::vector<int32_t>>();
      const auto golden = prompt["greedy_ids"].get<std::vector<int32_t>>();
      const double error = testing::relative_l2(all_logits(*split, ids), all_logits(*single, ids));
      std::printf("%s TP=2 vs TP=1, %zu-token prompt: logits rel L2 %.3g\n", name, ids.size(), error);
      EXPECT_LE(error, numerics::kLogitsRelL2);
      GenerateOptions options;
      options.max_new_tokens = int64_t(golden.size());
      const auto one = generate(*single, ids, options).output_ids;
      const auto two = generate(*split, ids, options).output_ids;
      EXPECT_EQ(two, one);
      EXPECT_EQ(two, golden);
    }
  }
}

// Engine-style steps: three prompts prefilled in one mixed step, then all-decode steps (graph
// capture on the first, replays after) feeding back greedy tokens, at TP = 2 and TP = 1; and at
// TP = 2 with the greedy tokens drawn on rank 0's GPU (forward_batch_sample). keep_hidden is refused.
TEST_F(TensorParallelCuda, BatchedGraphStepsGiveOneRanksTokens) {
  const std::string dir = kGolden + "qwen3_5_dense";
  auto single = load_qwen35_cuda(dir, golden_options());
  auto split = TensorParallelCudaModel::load(dir, 2, golden_options());
  const std::vector<std::vector<int32_t>> prompts = {{3, 17, 29, 4, 88}, {5}, {61, 2, 40, 7, 7, 7, 90, 11, 1}};
  const int64_t vocab = single->info().vocab_size;
  std::vector<std::vector<int32_t>> tokens[3];
  for (int which = 0; which < 3; ++which) {
    Model& model = which == 0 ? static_cast<Model&>(*single) : static_cast<Model&>(*split);
    std::vector<std::unique_ptr<SequenceState>> states;
    for (size_t i = 0; i < prompts.size(); ++i) states.push_back(model.new_sequence(64));
    std::vector<std::vector<int32_t>> feed = prompts;
    Buffer logits(DType::kF32, {int64_t(prompts.size()), vocab});
    for (int step = 0; step < 8; ++step) {
      std::vector<BatchItem> items;
      for (size_t i = 0; i < prompts.size(); ++i) items.push_back({feed[i], states[i].get()});
      std::vector<int32_t> next;
      if (which == 2) {
        std::vector<RowOutput> rows(prompts.size());
        for (RowOutput& row : rows) row.kind = RowOutput::Kind::kToken;  // greedy
        next.assign(prompts.size(), -1);
        model.forward_batch_sample(items, rows, next, logits);
      } else {
        model.forward_batch(items, logits);
        for (size_t i = 0; i < prompts.size(); ++i) {
          const float* row = logits.f32() + int64_t(i) * vocab;
          next.push_back(int32_t(std::max_element(row, row + vocab) - row));
        }
      }
      for (size_t i = 0; i < prompts.size(); ++i) feed[i] = {next[i]};
      tokens[which].push_back(next);
    }
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(states[i]->length(), int64_t(prompts[i].size()) + 7);
  }
  EXPECT_EQ(tokens[1], tokens[0]);
  EXPECT_EQ(tokens[2], tokens[0]);
  // Hidden states per sequence (the serving engine's MTP drafters) are not kept on ranks: an item
  // asking for them is refused before any rank runs.
  auto state = split->new_sequence(16);
  BatchItem keep{prompts[0], state.get()};
  keep.keep_hidden = true;
  Buffer logits(DType::kF32, {1, vocab});
  EXPECT_THROW(split->forward_batch(std::span<const BatchItem>(&keep, 1), logits), Error);
  EXPECT_EQ(state->length(), 0);
}

// The real 27B layer shapes (four layers), FP8 128x128 blocks, split in two: every rank's slice is
// whole blocks; a graph-replayed decode step gives the logits of the same step launched eagerly.
TEST_F(TensorParallelCuda, SyntheticFp8RealShapesSplitInTwo) {
  const Qwen35Config config = testing::reduced_config("qwen3.5-27b", 4);
  CudaModelOptions options;
  options.max_sequences = 4;
  options.max_context = 128;
  options.max_step_tokens = 4;
  auto model = TensorParallelCudaModel::synthetic(config, true, 2, options, 7, "27b-4");
  EXPECT_EQ(model->rank(1).config().num_heads * 2, config.num_heads);
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> next;
  for (bool graph : {true, true, false}) {
    model->randomize_state(3);
    model->decode_step({1, 2, 3, 4}, {10, 20, 30, 40}, &next, graph);
    logits.push_back(model->last_logits(4));
  }
  ASSERT_EQ(next.size(), 4u);
  for (int32_t id : next) EXPECT_TRUE(id >= 0 && id < config.vocab_size);
  EXPECT_TRUE(logits[0] == logits[1]) << "graph replay differs from the captured step";
  EXPECT_TRUE(logits[0] == logits[2]) << "graph and eager steps differ";
}

}  // namespace
}  // namespace vt
