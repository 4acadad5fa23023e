// Tensor parallelism on the CPU: the plan's ranges and checks, the in-process all-reduce, and the
// golden tiny models (dense, MoE, Next) run at TP=2 and TP=4 over a simulated world against TP=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../numerics.h"
#include "io/json_config.h"
#include "parallel/tensor_parallel_model.h"

namespace vt {
namespace {

const std::string kGoldenDir = std::string(VT_SOURCE_DIR) + "/tests/golden/";

Qwen35Config golden_config(const std::string& name) {
  return parse_qwen35_config(kGoldenDir + name + "/config.json");
}

// The 27B's shapes (QWEN35.md), FP8 128x128 blocks.
Qwen35Config config_27b() {
  Qwen35Config c;
  c.hidden_size = 5120, c.num_layers = 4, c.vocab_size = 248320;
  c.layer_types = {LayerKind::kLinearAttention, LayerKind::kLinearAttention,
                   LayerKind::kLinearAttention, LayerKind::kFullAttention};
  c.num_heads = 24, c.num_kv_heads = 4, c.head_dim = 256;
  c.linear_num_key_heads = 16, c.linear_num_value_heads = 48, c.linear_key_head_dim = 128;
  c.linear_value_head_dim = 128;
  c.intermediate_size = 17408;
  c.fp8 = Fp8BlockConfig{};
  return c;
}

// The 35B-A3B's: MoE 256 experts of width 512, shared expert 512.
Qwen35Config config_35b_a3b() {
  Qwen35Config c = config_27b();
  c.hidden_size = 2048, c.num_heads = 16, c.num_kv_heads = 2;
  c.linear_num_value_heads = 32;
  c.intermediate_size = 0, c.num_experts = 256, c.num_experts_per_tok = 8;
  c.moe_intermediate_size = 512, c.shared_expert_intermediate_size = 512;
  return c;
}

// How many ranks own each index of [0, size) when rank r owns ranges(r).
template <typename Ranges>
std::vector<int> coverage(int64_t size, int world, Ranges ranges) {
  std::vector<int> count(size_t(size), 0);
  for (int r = 0; r < world; ++r)
    for (IndexRange range : ranges(r)) {
      EXPECT_TRUE(range.begin >= 0 && range.end <= size)
          << "[" << range.begin << ", " << range.end << ") of " << size;
      for (int64_t i = std::max<int64_t>(range.begin, 0); i < std::min(range.end, size); ++i)
        ++count[size_t(i)];
    }
  return count;
}

// Expected coverage: `replicas` for indices in [begin, end) of each listed span, 1 elsewhere.
std::vector<int> expected(int64_t size, std::initializer_list<IndexRange> replicated,
                          int replicas) {
  std::vector<int> count(size_t(size), 1);
  for (IndexRange range : replicated)
    for (int64_t i = range.begin; i < range.end; ++i) count[size_t(i)] = replicas;
  return count;
}

void check_coverage(const Qwen35Config& c, int world) {
  SCOPED_TRACE("world " + std::to_string(world));
  TensorParallelPlan plan(c, world);
  const int64_t d = c.head_dim, dk = c.linear_key_head_dim;
  const int64_t q_rows = c.num_heads * 2 * d, kv_rows = c.num_kv_heads * d,
                key_dim = c.linear_num_key_heads * dk;
  const int kv = plan.kv_head_replicas(), key = plan.linear_key_head_replicas();
  EXPECT_EQ(kv, std::max<int64_t>(1, world / c.num_kv_heads));
  EXPECT_EQ(key, std::max<int64_t>(1, world / c.linear_num_key_heads));

  // Column-parallel rows: split parts exactly once, replicated KV / key-head parts `replicas`
  // times.
  EXPECT_EQ(
      coverage(q_rows + 2 * kv_rows, world, [&](int r) { return plan.attention_qkv_rows(r); }),
      expected(q_rows + 2 * kv_rows, {{q_rows, q_rows + 2 * kv_rows}}, kv));
  EXPECT_EQ(coverage(c.conv_dim(), world, [&](int r) { return plan.gdn_conv_channels(r); }),
            expected(c.conv_dim(), {{0, 2 * key_dim}}, key));
  EXPECT_EQ(coverage(c.conv_dim() + c.linear_value_dim(), world,
                     [&](int r) { return plan.gdn_in_proj_rows(r); }),
            expected(c.conv_dim() + c.linear_value_dim(), {{0, 2 * key_dim}}, key));
  EXPECT_EQ(
      coverage(2 * c.linear_num_value_heads, world, [&](int r) { return plan.gdn_ba_rows(r); }),
      expected(2 * c.linear_num_value_heads, {}, 1));
  // Row-parallel columns and per-head vectors: exactly once.
  EXPECT_EQ(
      coverage(c.num_heads * d, world,
               [&](int r) { return std::vector<IndexRange>{plan.attention_o_proj_columns(r)}; }),
      expected(c.num_heads * d, {}, 1));
  EXPECT_EQ(coverage(c.linear_value_dim(), world,
                     [&](int r) { return std::vector<IndexRange>{plan.gdn_out_proj_columns(r)}; }),
            expected(c.linear_value_dim(), {}, 1));
  EXPECT_EQ(
      coverage(c.linear_num_value_heads, world,
               [&](int r) { return std::vector<IndexRange>{plan.shard(r).linear_value_heads}; }),
      expected(c.linear_num_value_heads, {}, 1));
  for (auto [width, member] :
       {std::pair{c.intermediate_size, &RankShard::intermediate},
        std::pair{c.moe_intermediate_size, &RankShard::moe_intermediate},
        std::pair{c.shared_expert_intermediate_size, &RankShard::shared_expert_intermediate}}) {
    if (width == 0) continue;
    EXPECT_EQ(coverage(2 * width, world,
                       [&](int r) {
                         return TensorParallelPlan::gate_up_rows(plan.shard(r).*member, width);
                       }),
              expected(2 * width, {}, 1));
    EXPECT_EQ(coverage(width, world,
                       [&](int r) { return std::vector<IndexRange>{plan.shard(r).*member}; }),
              expected(width, {}, 1));
  }
  // A rank's query heads use only its KV heads, its value heads only its key heads (GQA groups).
  for (int r = 0; r < world; ++r) {
    const RankShard& s = plan.shard(r);
    const int64_t group = c.num_heads / c.num_kv_heads,
                  ratio = c.linear_num_value_heads / c.linear_num_key_heads;
    EXPECT_EQ(s.attention_heads.begin / group, s.kv_heads.begin);
    EXPECT_EQ((s.attention_heads.end - 1) / group, s.kv_heads.end - 1);
    EXPECT_EQ(s.linear_value_heads.begin / ratio, s.linear_key_heads.begin);
    EXPECT_EQ((s.linear_value_heads.end - 1) / ratio, s.linear_key_heads.end - 1);
    Qwen35Config rank = plan.rank_config(r);
    EXPECT_EQ(rank.num_heads * world, c.num_heads);
    EXPECT_EQ(rank.linear_num_value_heads * world, c.linear_num_value_heads);
    EXPECT_EQ(rank.num_kv_heads, s.kv_heads.size());
  }
}

TEST(TensorParallelPlan, EveryRowAndColumnIsCoveredOnceOrByItsReplicas) {
  for (const char* name : {"qwen3_5_dense", "qwen3_5_moe", "qwen3_next"})
    for (int world : {1, 2, 4}) {
      SCOPED_TRACE(name);
      check_coverage(golden_config(name), world);
    }
  for (int world : {1, 2, 4, 8})
    check_coverage(config_27b(), world);  // 8: KV heads on 2 ranks each
  for (int world : {2, 4}) check_coverage(config_35b_a3b(), world);
}

void expect_error(const Qwen35Config& config, int world, const std::string& fragment) {
  try {
    TensorParallelPlan plan(config, world);
    ADD_FAILURE() << "world " << world << ": no error, expected one naming '" << fragment << "'";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

TEST(TensorParallelPlan, DivisibilityErrorsNameTheDimension) {
  const Qwen35Config dense = golden_config("qwen3_5_dense");  // heads 4 / kv 2, GDN 2 / 4, MLP 128
  expect_error(dense, 3, "attention heads (num_attention_heads) = 4 is not divisible");
  expect_error(dense, 0, "tensor parallel size 0 must be at least 1");
  expect_error(dense, 8, "attention heads (num_attention_heads) = 4 is not divisible");
  Qwen35Config c = dense;
  c.num_heads = 12, c.num_kv_heads = 3;
  expect_error(c, 2, "KV heads (num_key_value_heads) = 3 must be divisible by it, or divide it");
  c = dense;
  c.linear_num_key_heads = 3, c.linear_num_value_heads = 6;
  expect_error(c, 2, "GDN key heads (linear_num_key_heads) = 3");
  c = dense;
  c.linear_num_value_heads = 6;  // key heads 2: replicated at 4, but 6 value heads do not split
  expect_error(c, 4, "GDN value heads (linear_num_value_heads) = 6 is not divisible");
  c = dense;
  c.intermediate_size = 129;
  expect_error(c, 2, "MLP width (intermediate_size) = 129 is not divisible");
  c = golden_config("qwen3_5_moe");
  c.shared_expert_intermediate_size = 50;
  expect_error(c, 4, "shared expert width (shared_expert_intermediate_size) = 50");
  // FP8: each rank must hold whole 128x128 blocks.
  expect_error(golden_config("qwen3_5_fp8"), 2,
               "FP8 block-scaled k_proj/v_proj rows (KV heads x head_dim) per rank = 64");
  expect_error(config_35b_a3b(), 8, "FP8 block-scaled expert width per rank = 64");
  // A dense-only width is not checked on an all-MoE model (and the other way round).
  c = golden_config("qwen3_5_moe");
  c.intermediate_size = 7;
  EXPECT_NO_THROW(TensorParallelPlan(c, 2));
}

// The rank's weights hold the rows the layout says, worked out here by hand: rank 1 of 2 on the
// dense golden model (GDN key heads 2 x dk, value heads 4 x dv; attention 4 heads, 2 KV heads).
TEST(TensorParallelPlan, ShardedWeightsHoldTheirHeadsRowsAndColumns) {
  const std::string dir = kGoldenDir + "qwen3_5_dense";
  const Qwen35Config c = golden_config("qwen3_5_dense");
  WeightStore store = WeightStore::open(dir);
  Qwen35Weights full = load_qwen35_weights(store, c, {});
  TensorParallelPlan plan(c, 2);
  Qwen35Weights rank = shard_qwen35_weights(full, plan, 1);
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, d = c.head_dim,
                h = c.hidden_size;
  auto row = [](const Buffer& w, int64_t r) {
    return std::vector<float>(w.f32() + r * w.shape()[1], w.f32() + (r + 1) * w.shape()[1]);
  };

  const GatedDeltaNetWeights& gdn = full.layers[0].gdn;
  const GatedDeltaNetWeights& local = rank.layers[0].gdn;
  ASSERT_EQ(local.in_proj.weight().shape(), Shape({2 * dk + 2 * dv * 2, h}));
  EXPECT_EQ(row(local.in_proj.weight(), 0), row(gdn.in_proj.weight(), dk));  // q of key head 1
  EXPECT_EQ(row(local.in_proj.weight(), dk),
            row(gdn.in_proj.weight(), 2 * dk + dk));  // k of key head 1
  EXPECT_EQ(row(local.in_proj.weight(), 2 * dk),
            row(gdn.in_proj.weight(), 4 * dk + 2 * dv));  // v of value head 2
  EXPECT_EQ(row(local.in_proj.weight(), 2 * dk + 2 * dv),
            row(gdn.in_proj.weight(), 4 * dk + 6 * dv));  // z, head 2
  EXPECT_EQ(local.conv_weight.shape()[0], 2 * dk + 2 * dv);
  const int64_t kernel = c.linear_conv_kernel;
  EXPECT_EQ(local.conv_weight.f32()[2 * dk * kernel],
            gdn.conv_weight.f32()[(4 * dk + 2 * dv) * kernel]);                   // v channel
  EXPECT_EQ(row(local.in_proj_ba.weight(), 0), row(gdn.in_proj_ba.weight(), 2));  // b of head 2
  EXPECT_EQ(row(local.in_proj_ba.weight(), 2), row(gdn.in_proj_ba.weight(), 6));  // a of head 2
  EXPECT_EQ(local.a_log.f32()[1], gdn.a_log.f32()[3]);
  EXPECT_EQ(local.dt_bias.f32()[0], gdn.dt_bias.f32()[2]);
  ASSERT_EQ(local.out_proj.weight().shape(), Shape({h, 2 * dv}));
  EXPECT_EQ(local.out_proj.weight().f32()[5 * 2 * dv],
            gdn.out_proj.weight().f32()[5 * 4 * dv + 2 * dv]);

  const AttentionWeights& attention = full.layers[3].attention;
  const AttentionWeights& local_attention = rank.layers[3].attention;
  ASSERT_EQ(local_attention.qkv.weight().shape(), Shape({2 * 2 * d + 2 * d, h}));
  EXPECT_EQ(row(local_attention.qkv.weight(), 0),
            row(attention.qkv.weight(), 2 * 2 * d));  // q, head 2
  EXPECT_EQ(row(local_attention.qkv.weight(), 3 * d),
            row(attention.qkv.weight(), 3 * 2 * d + d));  // gate, head 3
  EXPECT_EQ(row(local_attention.qkv.weight(), 4 * d),
            row(attention.qkv.weight(), 8 * d + d));  // k, KV head 1
  EXPECT_EQ(row(local_attention.qkv.weight(), 5 * d),
            row(attention.qkv.weight(), 8 * d + 3 * d));  // v, KV head 1
  EXPECT_EQ(local_attention.o_proj.weight().f32()[7 * 2 * d + 1],
            attention.o_proj.weight().f32()[7 * 4 * d + 2 * d + 1]);

  const int64_t inter = c.intermediate_size;
  const MlpWeights& mlp = rank.layers[0].mlp;
  EXPECT_EQ(row(mlp.gate_up.weight(), 0),
            row(full.layers[0].mlp.gate_up.weight(), inter / 2));  // gate
  EXPECT_EQ(row(mlp.gate_up.weight(), inter / 2),
            row(full.layers[0].mlp.gate_up.weight(), inter + inter / 2));  // up
  EXPECT_EQ(mlp.down.weight().f32()[3 * inter / 2],
            full.layers[0].mlp.down.weight().f32()[3 * inter + inter / 2]);
  EXPECT_EQ(rank.lm_head.weight().shape(), full.lm_head.weight().shape());  // replicated
}

TEST(InProcessAllReduce, SumsInRankOrderOnEveryRank) {
  const int world = 3;
  const int64_t count = 1001;  // not a multiple of the world: uneven reduce-scatter chunks
  InProcessAllReduce all_reduce(world);
  std::vector<std::vector<float>> values(world), results(world);
  // Rank 0 and 1 cancel, rank 2 is small: in rank order the sum is rank 2's value, while any
  // other order loses it to rounding against 1e8.
  for (int64_t i = 0; i < count; ++i) {
    values[0].push_back(1e8f * float(i % 5 + 1));
    values[1].push_back(-values[0].back());
    values[2].push_back(float(i % 17 + 1) / 3.0f);
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      for (int call = 0; call < 3; ++call) {  // repeated calls reuse the sum buffer safely
        results[r] = values[r];
        all_reduce.all_reduce(r, TensorView{results[r].data(), DType::kF32, Device::kCpu, {count}});
      }
    });
  for (auto& thread : threads) thread.join();
  for (int64_t i = 0; i < count; ++i) {
    const float expected = (values[0][i] + values[1][i]) + values[2][i];
    ASSERT_EQ(expected, values[2][i]);
    for (int r = 0; r < world; ++r)
      ASSERT_EQ(std::memcmp(&results[r][i], &expected, sizeof(float)), 0) << r << " " << i;
  }
}

TEST(InProcessAllReduce, MismatchedShapesAndAbortsFailEveryRankInsteadOfHanging) {
  InProcessAllReduce all_reduce(2);
  std::vector<float> a(8), b(6);
  int failures = 0;
  std::thread other([&] {
    try {
      all_reduce.all_reduce(1, TensorView{b.data(), DType::kF32, Device::kCpu, {6}});
    } catch (const WorldAborted&) {
      ++failures;
    }
  });
  try {
    all_reduce.all_reduce(0, TensorView{a.data(), DType::kF32, Device::kCpu, {8}});
  } catch (const WorldAborted& error) {
    EXPECT_NE(std::string(error.what()).find("ranks disagree on the shape"), std::string::npos)
        << error.what();
    ++failures;
  }
  other.join();
  EXPECT_EQ(failures, 2);

  all_reduce.reset();
  std::thread waiting([&] {
    EXPECT_THROW(all_reduce.all_reduce(1, TensorView{b.data(), DType::kF32, Device::kCpu, {6}}),
                 WorldAborted);
  });
  all_reduce.abort("rank 0 failed");
  waiting.join();
}

double relative_l2(const float* a, const float* b, size_t count) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < count; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

struct GreedyRun {
  std::vector<float> prompt_logits;             // [len, vocab]
  std::vector<std::vector<float>> step_logits;  // per decode step, [vocab]
  std::vector<int32_t> ids;                     // greedy continuation
};

// One prefill of the prompt (logits at every position), then greedy decode token by token.
GreedyRun run_greedy(Model& model, const std::vector<int32_t>& prompt, int64_t new_tokens) {
  const int64_t vocab = model.info().vocab_size, len = int64_t(prompt.size());
  auto state = model.new_sequence(len + new_tokens);
  GreedyRun run;
  Buffer logits(DType::kF32, {len, vocab});
  ForwardOptions all;
  all.all_logits = true;
  model.forward(prompt, *state, logits, all);
  run.prompt_logits.assign(logits.f32(), logits.f32() + len * vocab);
  std::vector<float> last(logits.f32() + (len - 1) * vocab, logits.f32() + len * vocab);
  Buffer step(DType::kF32, {1, vocab});
  for (int64_t i = 0; i < new_tokens; ++i) {
    const int32_t next = int32_t(std::max_element(last.begin(), last.end()) - last.begin());
    run.ids.push_back(next);
    if (i + 1 == new_tokens) break;
    model.forward(std::span<const int32_t>(&next, 1), *state, step, {});
    last.assign(step.f32(), step.f32() + vocab);
    run.step_logits.push_back(last);
  }
  return run;
}

void check_against_single_rank(const std::string& name) {
  const std::string dir = kGoldenDir + name;
  nlohmann::json reference = read_json_file(dir + "/reference.json");
  Qwen35Model single(dir, {});
  std::vector<std::unique_ptr<TensorParallelQwen35Model>> parallel;
  for (int world : {2, 4})
    parallel.push_back(
        std::make_unique<TensorParallelQwen35Model>(dir, world, Qwen35LoadOptions{}));
  for (const auto& prompt : reference["prompts"]) {
    const auto ids = prompt["ids"].get<std::vector<int32_t>>();
    const auto golden = prompt["greedy_ids"].get<std::vector<int32_t>>();
    const GreedyRun expected = run_greedy(single, ids, int64_t(golden.size()));
    ASSERT_EQ(expected.ids, golden) << name;  // TP=1 is the golden reference's output
    for (auto& model : parallel) {
      const int world = model->plan().world_size();
      SCOPED_TRACE(name + " TP=" + std::to_string(world) + ", prompt of " +
                   std::to_string(ids.size()));
      const GreedyRun run = run_greedy(*model, ids, int64_t(golden.size()));
      EXPECT_EQ(run.ids, expected.ids);
      const double prompt_error = relative_l2(
          run.prompt_logits.data(), expected.prompt_logits.data(), run.prompt_logits.size());
      EXPECT_LE(prompt_error, numerics::kSamePathRelL2);
      double worst_step = 0;
      for (size_t s = 0; s < run.step_logits.size() && s < expected.step_logits.size(); ++s)
        worst_step = std::max(worst_step,
                              relative_l2(run.step_logits[s].data(), expected.step_logits[s].data(),
                                          run.step_logits[s].size()));
      EXPECT_LE(worst_step, numerics::kSamePathRelL2);
      std::printf("%s TP=%d prompt %zu: prompt logits rel L2 %.3g, decode worst %.3g\n",
                  name.c_str(), world, ids.size(), prompt_error, worst_step);
    }
  }
}

TEST(TensorParallelGolden, Qwen35DenseAtTp2AndTp4EqualsTp1) {
  check_against_single_rank("qwen3_5_dense");
}
TEST(TensorParallelGolden, Qwen35MoeAtTp2AndTp4EqualsTp1) {
  check_against_single_rank("qwen3_5_moe");
}
TEST(TensorParallelGolden, Qwen3NextAtTp2AndTp4EqualsTp1) {
  check_against_single_rank("qwen3_next");
}

// One rank holding everything is the single-rank model, bit for bit.
TEST(TensorParallelGolden, OneRankWorldIsBitIdentical) {
  const std::string dir = kGoldenDir + "qwen3_5_moe";
  nlohmann::json reference = read_json_file(dir + "/reference.json");
  const auto ids = reference["prompts"][1]["ids"].get<std::vector<int32_t>>();
  Qwen35Model single(dir, {});
  TensorParallelQwen35Model world(dir, 1, {});
  const GreedyRun a = run_greedy(single, ids, 4), b = run_greedy(world, ids, 4);
  EXPECT_EQ(std::memcmp(a.prompt_logits.data(), b.prompt_logits.data(),
                        a.prompt_logits.size() * sizeof(float)),
            0);
  EXPECT_EQ(a.ids, b.ids);
}

// Speculative rollback through the world: each rank replays its own GDN heads.
TEST(TensorParallelGolden, RollbackMatchesTheSingleRankModel) {
  const std::string dir = kGoldenDir + "qwen3_5_dense";
  nlohmann::json reference = read_json_file(dir + "/reference.json");
  const auto ids = reference["prompts"][1]["ids"].get<std::vector<int32_t>>();
  Qwen35Model single(dir, {});
  TensorParallelQwen35Model world(dir, 2, {});
  std::vector<std::vector<float>> outputs;
  for (Model* model : {static_cast<Model*>(&single), static_cast<Model*>(&world)}) {
    const int64_t vocab = model->info().vocab_size;
    auto state = model->new_sequence(int64_t(ids.size()));
    Buffer logits(DType::kF32, {1, vocab});
    model->forward(std::span<const int32_t>(ids.data(), 100), *state, logits, {});
    ForwardOptions keep;
    keep.keep_rollback = true;
    Buffer draft_logits(DType::kF32, {1, vocab});
    model->forward(std::span<const int32_t>(ids.data() + 100, 5), *state, draft_logits, keep);
    model->rollback(*state, 102);
    EXPECT_EQ(state->length(), 102);
    model->commit(*state);
    model->forward(std::span<const int32_t>(ids.data() + 102, 3), *state, logits, {});
    outputs.emplace_back(logits.f32(), logits.f32() + vocab);
  }
  EXPECT_LE(relative_l2(outputs[1].data(), outputs[0].data(), outputs[0].size()),
            numerics::kSamePathRelL2);
}

}  // namespace
}  // namespace vt
