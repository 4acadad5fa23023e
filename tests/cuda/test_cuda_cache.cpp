// The CUDA runner's one cache (golden Qwen3.5, f32 activations): sequences whose KV blocks are
// scattered over a fragmented pool (grown a block at a time as the engine grows them, batched
// steps and decode graphs over them) give the logits of sequences over blocks in order; a prefix
// hit shares a saved prefix's full blocks and copies its partly filled last one (the same logits as
// a cold run), and no forward writes a shared block; the pool is shared (many short sequences fit
// where one long one does); the engine admits into the model's pool.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "cache/hybrid_cache.h"
#include "cuda_test_support.h"
#include "engine/engine.h"
#include "runtime/qwen3_5_cuda.h"

namespace vt {
namespace {

using testing::relative_l2;

const std::string kDense = std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_dense";

class CudaCache : public testing::GpuTest {};

// Blocks of 8 tokens, a pool of 40 (320 tokens), eight slots of at most 96 tokens; the built-in
// GEMM rule, so two runs of the same steps do the same arithmetic.
CudaModelOptions small_pool_options() {
  CudaModelOptions options;
  options.activations = DType::kF32;
  options.tune_gemms = false;
  options.max_sequences = 8;
  options.max_context = 96;
  options.block_size = 8;
  options.cache_blocks = 40;
  options.max_step_tokens = 32;
  options.max_logit_rows = 4;
  return options;
}

std::vector<int32_t> random_ids(std::mt19937& rng, int64_t count, int64_t vocab) {
  std::vector<int32_t> ids(size_t(count), 0);
  for (auto& id : ids) id = int32_t(rng() % vocab);
  return ids;
}

bool in_order(const std::vector<int32_t>& blocks) {
  for (size_t i = 1; i < blocks.size(); ++i)
    if (blocks[i] != blocks[i - 1] + 1) return false;
  return true;
}

// Two sequences (prompts of 30 and 21 tokens, then 14 decode tokens each) as batched steps: prompt
// chunks of 8 side by side, then all-decode steps (the CUDA graph of batch 2). `grow` is called
// before each step with the tokens each sequence will hold after it. The logits of every step.
std::vector<float> run_pair(CudaRunner& model, SequenceState& a, SequenceState& b,
                            const std::vector<std::vector<int32_t>>& ids,
                            const std::function<void(int64_t, int64_t)>& grow) {
  const int64_t vocab = model.info().vocab_size;
  const std::vector<int64_t> prompts = {30, 21};
  std::vector<SequenceState*> states = {&a, &b};
  std::vector<float> all;
  Buffer logits(DType::kF32, {2, vocab});
  const int64_t total = int64_t(ids[0].size());
  while (a.length() < total && b.length() < total) {
    std::vector<BatchItem> items;
    std::vector<int64_t> after(2);
    for (size_t s = 0; s < 2; ++s) {
      const int64_t length = states[s]->length();
      const int64_t count = length < prompts[s] ? std::min<int64_t>(8, prompts[s] - length) : 1;
      items.push_back({std::span<const int32_t>(ids[s]).subspan(size_t(length), size_t(count)), states[s]});
      after[s] = length + count;
    }
    grow(after[0], after[1]);
    model.forward_batch(items, logits);
    all.insert(all.end(), logits.f32(), logits.f32() + logits.numel());
  }
  return all;
}

// The pool fragmented first (entries admitted, every other one released), then one sequence grown a
// block at a time as the engine grows it (admitted for 8 tokens, reserved before each step) beside
// one that admitted itself: their blocks are out of order and interleaved, and every step's logits
// are those of the same steps over blocks in order.
TEST_F(CudaCache, ScatteredBlocksGiveTheLogitsOfBlocksInOrder) {
  auto model = load_qwen35_cuda(kDense, small_pool_options());
  HybridCache& cache = *model->kv_cache();
  EXPECT_EQ(cache.num_blocks(), 40);
  EXPECT_EQ(cache.block_size(), 8);
  std::mt19937 rng(3);
  const int64_t vocab = model->info().vocab_size;
  const std::vector<std::vector<int32_t>> ids = {random_ids(rng, 44, vocab), random_ids(rng, 44, vocab)};
  std::vector<float> in_order_logits;
  {
    auto a = model->new_sequence(48), b = model->new_sequence(48);
    in_order_logits = run_pair(*model, *a, *b, ids, [](int64_t, int64_t) {});
  }
  ASSERT_EQ(cache.usage().blocks_used, 0);
  for (int64_t entry = 1; entry <= 5; ++entry) ASSERT_TRUE(cache.admit(entry, 16, 0));  // 2 blocks each
  for (int64_t entry = 1; entry <= 5; entry += 2) cache.release(entry);
  constexpr int64_t kGrown = 100;
  ASSERT_TRUE(cache.admit(kGrown, 8, 0));
  auto a = model->new_sequence_in_cache(kGrown, 48);
  auto b = model->new_sequence(48);
  const auto grow = [&](int64_t tokens_a, int64_t) { ASSERT_TRUE(cache.reserve(kGrown, tokens_a)); };
  const std::vector<float> scattered_logits = run_pair(*model, *a, *b, ids, grow);
  const std::vector<int32_t>& blocks = cache.block_table(kGrown);
  EXPECT_FALSE(in_order(blocks));
  EXPECT_EQ(int64_t(blocks.size()), 6);
  ASSERT_EQ(scattered_logits.size(), in_order_logits.size());
  EXPECT_TRUE(scattered_logits == in_order_logits)
      << "rel L2 " << relative_l2(scattered_logits, in_order_logits);
  // Tokens past the entry's blocks are refused before anything runs (the caller reserves first).
  constexpr int64_t kShort = 300;
  ASSERT_TRUE(cache.admit(kShort, 8, 0));
  auto c = model->new_sequence_in_cache(kShort, 48);
  Buffer one(DType::kF32, {1, vocab});
  EXPECT_THROW(model->forward(std::span<const int32_t>(ids[0]).first(9), *c, one, {}), Error);
  EXPECT_EQ(c->length(), 0);
  for (auto* state : {&a, &c}) state->reset();
  for (int64_t entry : {kGrown, kShort, int64_t(2), int64_t(4)}) cache.release(entry);
  b.reset();
  EXPECT_EQ(cache.usage().blocks_used + cache.usage().slots_used, 0);
}

// A prefix saved from a sequence over scattered blocks (37 tokens: four full blocks of 8 and five
// rows of a fifth) and started again by another sequence that holds the same four blocks at the
// head of its table (shared, read-only) and a copy of the fifth (copy_kv_block) in a block of its
// own: the two continue with the same logits, as a sequence that ran the whole prompt itself (a
// cold run), and the shared blocks are never written (each forward checks it). The snapshot holds
// only the linear-attention states.
TEST_F(CudaCache, PrefixHitsShareFullBlocksAndCopyThePartlyFilledOne) {
  auto model = load_qwen35_cuda(kDense, small_pool_options());
  HybridCache& cache = *model->kv_cache();
  for (int64_t entry = 1; entry <= 6; ++entry) ASSERT_TRUE(cache.admit(entry, 8, 0));  // a block each
  for (int64_t entry = 1; entry <= 6; entry += 3) cache.release(entry);
  std::mt19937 rng(7);
  const int64_t vocab = model->info().vocab_size;
  const std::vector<int32_t> prompt = random_ids(rng, 37, vocab), next = random_ids(rng, 10, vocab);
  constexpr int64_t kSaved = 200, kRestored = 201, kCold = 202;
  ASSERT_TRUE(cache.admit(kSaved, 60, 0));
  auto saved = model->new_sequence_in_cache(kSaved, 60);
  Buffer logits(DType::kF32, {1, vocab});
  model->forward(prompt, *saved, logits, {});
  auto snapshot = model->save_state(*saved);
  ASSERT_TRUE(snapshot);
  EXPECT_EQ(snapshot->length(), 37);
  for (int64_t entry = 2; entry <= 6; entry += 3) cache.release(entry);
  const std::vector<int32_t> saved_blocks = cache.block_table(kSaved);
  ASSERT_TRUE(cache.admit(kRestored, 60, 0, std::span<const int32_t>(saved_blocks).first(4)));
  const std::vector<int32_t>& restored_blocks = cache.block_table(kRestored);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(restored_blocks[i], saved_blocks[i]);
  EXPECT_NE(restored_blocks[4], saved_blocks[4]);
  EXPECT_FALSE(cache.exclusive(kRestored, 0, 37));
  EXPECT_TRUE(cache.exclusive(kRestored, 37, 60));
  auto restored = model->new_sequence_in_cache(kRestored, 60);
  model->copy_kv_block(saved_blocks[4], restored_blocks[4]);
  model->restore_state(*snapshot, *restored);
  EXPECT_FALSE(in_order(cache.block_table(kSaved)));
  ASSERT_TRUE(cache.admit(kCold, 60, 0));
  auto cold = model->new_sequence_in_cache(kCold, 60);
  EXPECT_EQ(model->save_state(*cold)->bytes(), snapshot->bytes());  // at 0 tokens: no KV rows in either
  model->forward(prompt, *cold, logits, {});
  for (int32_t token : next) {
    std::vector<float> rows[3];
    int i = 0;
    for (SequenceState* state : {saved.get(), restored.get(), cold.get()}) {
      model->forward(std::span<const int32_t>(&token, 1), *state, logits, {});
      rows[i++].assign(logits.f32(), logits.f32() + vocab);
    }
    EXPECT_TRUE(rows[0] == rows[1]) << "rel L2 " << relative_l2(rows[0], rows[1]);
    EXPECT_TRUE(rows[0] == rows[2]) << "rel L2 " << relative_l2(rows[0], rows[2]);
  }
  for (auto* state : {&saved, &restored, &cold}) state->reset();
  for (int64_t entry : {kSaved, kRestored, kCold, int64_t(3), int64_t(6)}) cache.release(entry);
  EXPECT_EQ(cache.usage().blocks_used + cache.usage().slots_used, 0);
}

// A sequence that shares a prefix's blocks cannot write into them: a forward from inside the shared
// blocks (a sequence set back below its prefix) is refused before anything runs.
TEST_F(CudaCache, AForwardIntoASharedBlockIsRefused) {
  auto model = load_qwen35_cuda(kDense, small_pool_options());
  HybridCache& cache = *model->kv_cache();
  std::mt19937 rng(9);
  const int64_t vocab = model->info().vocab_size;
  const std::vector<int32_t> prompt = random_ids(rng, 16, vocab);
  ASSERT_TRUE(cache.admit(1, 24, 0));
  const std::vector<int32_t> first_blocks(cache.block_table(1).begin(), cache.block_table(1).begin() + 2);
  ASSERT_TRUE(cache.admit(2, 24, 0, first_blocks));  // shares blocks 0 and 1 without their contents
  auto sharer = model->new_sequence_in_cache(2, 24);
  Buffer logits(DType::kF32, {1, vocab});
  EXPECT_THROW(model->forward(prompt, *sharer, logits, {}), Error);
  EXPECT_EQ(sharer->length(), 0);
  sharer.reset();
  cache.release(2);
  cache.release(1);
  EXPECT_EQ(cache.usage().blocks_used, 0);
}

// One pool for every sequence: it holds one sequence of 96 tokens or four of 24 (with slots to
// spare), and the engine admits into it (its size and block size, not the engine's options).
TEST_F(CudaCache, ThePoolIsSharedAndTheEngineAdmitsIntoIt) {
  CudaModelOptions options = small_pool_options();
  options.cache_blocks = 12;
  auto model = load_qwen35_cuda(kDense, options);
  {
    auto whole = model->new_sequence(96);
    EXPECT_THROW(model->new_sequence(8), Error);  // no block left
  }
  std::vector<std::unique_ptr<SequenceState>> short_ones;
  for (int i = 0; i < 4; ++i) short_ones.push_back(model->new_sequence(24));
  EXPECT_THROW(model->new_sequence(8), Error);  // no block left
  short_ones.clear();
  EngineOptions engine_options;
  engine_options.cache_blocks = 5000;
  engine_options.block_size = 16;
  engine_options.max_running = 4;
  engine_options.prefill_chunk = 8;
  engine_options.step_token_budget = 32;
  Engine engine(*model, nullptr, engine_options);
  EXPECT_EQ(engine.stats().cache.blocks_total, 12);
  EXPECT_EQ(engine.max_request_tokens(), std::min<int64_t>(96, model->info().max_positions));
}

}  // namespace
}  // namespace vt
