// The CUDA forward against HF transformers (the golden references) and the CPU reference.
// f32 activations: the same tolerances as the CPU reference. bf16 activations: a documented,
// looser bound (docs/numerics.md). Skips without a GPU unless VT_REQUIRE_GPU is set.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "../numerics.h"
#include "../unit/checkpoint_fixture.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda_test_support.h"
#include "engine/engine.h"
#include "io/json_config.h"
#include "io/safetensors.h"
#include "model/generate.h"
#include "models/registry.h"
#include "ops/activation/activation.h"
#include "ops/gdn/gdn.h"
#include "ops/norm/norm.h"
#include "profile/kernel_gate.h"
#include "profile/kernel_recorder.h"
#include "profile/step_report.h"
#include "runtime/qwen3_5_cuda.h"
#include "trace/intent.h"

namespace vt {
namespace {

using testing::relative_l2;

const std::string kGolden = std::string(VT_SOURCE_DIR) + "/tests/golden/";

class CudaModel : public testing::GpuTest {};

// A GEMM plan cache of this process's own for a test's lifetime: models built one after the other
// then run the plan the first one tuned (other processes tuning the same shapes at once, under
// another load, cannot hand the second model other backends).
class PrivatePlanCache {
 public:
  PrivatePlanCache() : dir_(::testing::TempDir() + "vt_plan_" + std::to_string(getpid())) {
    setenv("VT_CACHE_DIR", dir_.c_str(), 1);
  }
  ~PrivatePlanCache() { unsetenv("VT_CACHE_DIR"); }

 private:
  std::string dir_;
};

using testing::read_f32;
using testing::reduced_config;

// A golden case's model: its activations, 256 tokens of context, step and logit rows, and the
// built-in GEMM rule (no timing decides what a golden case checks).
CudaModelOptions golden_options(DType activations) {
  CudaModelOptions options;
  options.tune_gemms = false;
  options.activations = activations;
  options.max_context = 256;
  options.max_step_tokens = 256;
  options.max_logit_rows = 256;
  return options;
}

struct CaseResult {
  double worst_error = 0;
  int greedy_matched = 0, greedy_total = 0;
};

// The FP8 GEMMs run the built-in rule (fp32-summing kernels: gemv at M = 1, mma above) unless
// VT_GEMM_BACKEND forces one: no timing decides what a golden case checks.
CaseResult run_case(const std::string& name, const std::string& mode, DType activations) {
  const std::string dir = kGolden + name;
  nlohmann::json reference = read_json_file(dir + "/reference.json");
  const auto& prompts = mode.empty() ? reference["prompts"] : reference["modes"][mode]["prompts"];
  CudaModelOptions options = golden_options(activations);
  auto model = load_qwen35_cuda(dir, options);
  CaseResult result;
  for (const auto& prompt : prompts) {
    auto ids = prompt["ids"].get<std::vector<int32_t>>();
    auto golden_ids = prompt["greedy_ids"].get<std::vector<int32_t>>();
    auto golden_logits = read_f32(dir + "/" + prompt["logits_file"].get<std::string>());
    const int64_t len = int64_t(ids.size()), vocab = model->info().vocab_size;
    {
      auto state = model->new_sequence(len);
      Buffer logits(DType::kF32, {len, vocab});
      ForwardOptions all;
      all.all_logits = true;
      model->forward(ids, *state, logits, all);
      const double error = relative_l2({logits.f32(), logits.f32() + logits.numel()}, golden_logits);
      result.worst_error = std::max(result.worst_error, error);
      std::printf("cuda %s %s %s prompt %lld: logits rel L2 %.3g\n", name.c_str(), mode.c_str(),
                  std::string(dtype_name(activations)).c_str(), (long long)len, error);
    }
    GenerateOptions generate_options;
    generate_options.max_new_tokens = int64_t(golden_ids.size());
    auto output = generate(*model, ids, generate_options).output_ids;
    int matched = 0;
    while (matched < int(output.size()) && output[matched] == golden_ids[matched]) ++matched;
    result.greedy_matched += matched;
    result.greedy_total += int(golden_ids.size());
    if (activations == DType::kF32 && mode != "w8a8") {
      EXPECT_EQ(output, golden_ids) << name << " " << mode;
    }
  }
  return result;
}

TEST_F(CudaModel, GoldenF32MatchesHf) {
  for (const char* name : {"qwen3_5_dense", "qwen3_5_vl", "qwen3_5_moe", "qwen3_next"}) {
    auto result = run_case(name, "", DType::kF32);
    EXPECT_LE(result.worst_error, numerics::kLogitsRelL2) << name;
  }
}

// W8A8 on the fp32-summing kernels, then on each wgmma split forced for every GEMM (their 128-K
// block accumulator keeps ~14 bits, which the activation re-quantisation amplifies:
// kFp8W8A8WgmmaRelL2); wgmma_partials: the block output projections left as partials for the
// norms after them (the others on wgmma).
TEST_F(CudaModel, GoldenFp8W8A8WithinBound) {
  auto result = run_case("qwen3_5_fp8", "w8a8", DType::kF32);
  EXPECT_LE(result.worst_error, numerics::kFp8W8A8RelL2);
  for (const char* backend : {"wgmma", "wgmma_cluster", "wgmma_partials"}) {
    setenv("VT_GEMM_BACKEND", backend, 1);
    std::printf("VT_GEMM_BACKEND=%s:\n", backend);
    result = run_case("qwen3_5_fp8", "w8a8", DType::kF32);
    unsetenv("VT_GEMM_BACKEND");
    EXPECT_LE(result.worst_error, numerics::kFp8W8A8WgmmaRelL2) << backend;
  }
}

TEST_F(CudaModel, GoldenBf16ActivationsWithinBound) {
  for (const char* name : {"qwen3_5_dense", "qwen3_5_vl", "qwen3_5_moe", "qwen3_next"}) {
    auto result = run_case(name, "", DType::kBF16);
    const bool moe = std::string(name) == "qwen3_5_moe" || std::string(name) == "qwen3_next";
    EXPECT_LE(result.worst_error, moe ? numerics::kCudaBf16MoeActivationsRelL2 : numerics::kCudaBf16ActivationsRelL2)
        << name;
    std::printf("cuda %s bf16: greedy tokens matching HF before the first difference: %d of %d\n", name,
                result.greedy_matched, result.greedy_total);
  }
}

// The same inputs give bit-identical outputs run after run (no atomics in any reduction).
TEST_F(CudaModel, Deterministic) {
  CudaModelOptions options;
  options.activations = DType::kBF16;
  options.max_context = 256;
  options.max_step_tokens = 256;
  options.max_logit_rows = 256;
  auto model = load_qwen35_cuda(kGolden + "qwen3_5_dense", options);
  nlohmann::json reference = read_json_file(kGolden + "qwen3_5_dense/reference.json");
  auto ids = reference["prompts"][1]["ids"].get<std::vector<int32_t>>();
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 3; ++run) {
    auto state = model->new_sequence(int64_t(ids.size()));
    Buffer logits(DType::kF32, {int64_t(ids.size()), model->info().vocab_size});
    ForwardOptions all;
    all.all_logits = true;
    model->forward(ids, *state, logits, all);
    runs.emplace_back(logits.f32(), logits.f32() + logits.numel());
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

// The chunked delta rule (gdn_chunked) and the token-by-token one agree through the whole model
// on the 150-token golden prompt (f32); kAuto takes the chunks at that length (bit-identical to
// kChunked), and a forward that keeps a rollback window cannot ask for chunks.
TEST_F(CudaModel, ChunkedPrefillEqualsRecurrentThroughTheModel) {
  for (const char* name : {"qwen3_5_dense", "qwen3_next"}) {
    CudaModelOptions options;
    options.activations = DType::kF32;
    options.max_context = 256;
    options.max_step_tokens = 256;
    options.max_logit_rows = 256;
    auto model = load_qwen35_cuda(kGolden + name, options);
    nlohmann::json reference = read_json_file(kGolden + name + "/reference.json");
    auto ids = reference["prompts"][1]["ids"].get<std::vector<int32_t>>();
    ASSERT_GE(ids.size(), 128u) << name;
    const auto logits_of = [&](DeltaRuleChoice choice) {
      auto state = model->new_sequence(int64_t(ids.size()));
      Buffer logits(DType::kF32, {int64_t(ids.size()), model->info().vocab_size});
      ForwardOptions all;
      all.all_logits = true;
      all.delta_rule = choice;
      model->forward(ids, *state, logits, all);
      return std::vector<float>(logits.f32(), logits.f32() + logits.numel());
    };
    const auto chunked = logits_of(DeltaRuleChoice::kChunked), recurrent = logits_of(DeltaRuleChoice::kRecurrent);
    const auto automatic = logits_of(DeltaRuleChoice::kAuto);
    const double error = relative_l2(chunked, recurrent);
    std::printf("cuda %s: chunked vs token-by-token delta rule, logits rel L2 %.3g\n", name, error);
    EXPECT_LE(error, numerics::kSamePathRelL2) << name;
    EXPECT_TRUE(automatic == chunked) << name << ": kAuto did not take the chunked path at " << ids.size() << " tokens";
    EXPECT_FALSE(automatic == recurrent) << name << ": the chunked path left the logits bit-identical";
    auto state = model->new_sequence(int64_t(ids.size()));
    Buffer last(DType::kF32, {1, model->info().vocab_size});
    ForwardOptions window;
    window.keep_rollback = true;
    window.delta_rule = DeltaRuleChoice::kChunked;
    try {
      model->forward(ids, *state, last, window);
      ADD_FAILURE() << name << ": a chunked forward keeping a rollback window was accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("chunked delta rule"), std::string::npos) << error.what();
    }
  }
}

// A batched step mixing prompt chunks of 64+ tokens (chunked delta rule) with a decode token and a
// short chunk (token by token): each sequence's logits match running it alone token by token.
TEST_F(CudaModel, MixedBatchOfChunkedPrefillsAndDecodes) {
  CudaModelOptions options;
  options.activations = DType::kF32;
  options.max_sequences = 5;  // the batch's four and one run alone
  options.max_context = 256;
  options.max_step_tokens = 256;
  options.max_logit_rows = 8;
  auto model = load_qwen35_cuda(kGolden + "qwen3_5_dense", options);
  const int64_t vocab = model->info().vocab_size;
  nlohmann::json reference = read_json_file(kGolden + "qwen3_5_dense/reference.json");
  const auto prompt = reference["prompts"][1]["ids"].get<std::vector<int32_t>>();
  // Sequence 0: 20 tokens already, one more now; 1: 100 new; 2: 9 already, 70 new; 3: 30 new.
  const std::vector<std::pair<int64_t, int64_t>> plan = {{20, 1}, {0, 100}, {9, 70}, {0, 30}};
  std::vector<std::unique_ptr<SequenceState>> states;
  std::vector<std::vector<int32_t>> fresh;
  Buffer one(DType::kF32, {1, vocab});
  ForwardOptions token_by_token;
  token_by_token.delta_rule = DeltaRuleChoice::kRecurrent;
  for (size_t s = 0; s < plan.size(); ++s) {
    const auto [cached, count] = plan[s];
    states.push_back(model->new_sequence(200));
    const auto begin = prompt.begin() + int64_t(s) * 7;
    if (cached > 0) model->forward({&*begin, size_t(cached)}, *states.back(), one, token_by_token);
    fresh.emplace_back(begin + cached, begin + cached + count);
  }
  std::vector<BatchItem> items;
  for (size_t s = 0; s < plan.size(); ++s) items.push_back({fresh[s], states[s].get(), false});
  Buffer batch(DType::kF32, {int64_t(items.size()), vocab});
  model->forward_batch(items, batch);
  for (size_t s = 0; s < plan.size(); ++s) {
    const auto [cached, count] = plan[s];
    auto alone = model->new_sequence(200);
    const auto begin = prompt.begin() + int64_t(s) * 7;
    model->forward({&*begin, size_t(cached + count)}, *alone, one, token_by_token);
    const std::vector<float> want(one.f32(), one.f32() + vocab);
    const std::vector<float> got(batch.f32() + int64_t(s) * vocab, batch.f32() + int64_t(s + 1) * vocab);
    EXPECT_LE(relative_l2(got, want), numerics::kLogitsRelL2) << "sequence " << s << ": " << count << " new tokens";
  }
}

// A decode step of 17 sequences replays the graph captured for 20 (warm_up), its last three rows
// decoding in the scratch slot: each sequence's logits equal its own step run alone, unbatched.
TEST_F(CudaModel, PaddedDecodeGraphMatchesUnbatchedSteps) {
  CudaModelOptions options;
  options.activations = DType::kF32;
  options.max_sequences = 24;
  options.max_context = 64;
  options.max_step_tokens = 64;
  auto model = load_qwen35_cuda(kGolden + "qwen3_5_dense", options);
  ASSERT_EQ(model->decode_graph_batch(17), 20);
  ASSERT_EQ(model->decode_graph_batch(16), 16);
  ASSERT_EQ(model->decode_graph_batch(23), 24);
  model->warm_up();
  const int64_t vocab = model->info().vocab_size, count = 17;
  nlohmann::json reference = read_json_file(kGolden + "qwen3_5_dense/reference.json");
  const auto prompt = reference["prompts"][1]["ids"].get<std::vector<int32_t>>();
  ForwardOptions token_by_token;
  token_by_token.delta_rule = DeltaRuleChoice::kRecurrent;
  Buffer one(DType::kF32, {1, vocab});
  std::vector<std::unique_ptr<SequenceState>> states;
  std::vector<int32_t> next(static_cast<size_t>(count));
  std::vector<BatchItem> items;
  for (int64_t s = 0; s < count; ++s) {
    const auto begin = prompt.begin() + s % 5;
    states.push_back(model->new_sequence(32));
    model->forward({&*begin, size_t(3 + s % 4)}, *states.back(), one, token_by_token);
    next[size_t(s)] = *(begin + 3 + s % 4);
  }
  for (int64_t s = 0; s < count; ++s) items.push_back({std::span<const int32_t>(&next[size_t(s)], 1), states[size_t(s)].get()});
  Buffer batch(DType::kF32, {count, vocab});
  model->forward_batch(items, batch);
  states.clear();
  for (int64_t s = 0; s < count; ++s) {
    const auto begin = prompt.begin() + s % 5;
    auto alone = model->new_sequence(32);
    model->forward({&*begin, size_t(4 + s % 4)}, *alone, one, token_by_token);
    const std::vector<float> want(one.f32(), one.f32() + vocab);
    const std::vector<float> got(batch.f32() + s * vocab, batch.f32() + (s + 1) * vocab);
    EXPECT_LE(relative_l2(got, want), numerics::kLogitsRelL2) << "sequence " << s;
  }
}

// Synthetic 27B at real shapes: builds, runs a batched decode step, produces valid token ids.
TEST_F(CudaModel, SyntheticRealShapesDecode) {
  Qwen35Config config = reduced_config("qwen3.5-27b", 4);
  CudaModelOptions options;
  options.max_sequences = 4;
  options.max_context = 128;
  options.max_step_tokens = 4;
  Qwen35CudaModel model(config, synthetic_cuda_weights(config, true, 7), options, "synthetic");
  model.randomize_state(3);
  std::vector<int32_t> next;
  model.decode_step({1, 2, 3, 4}, {10, 20, 30, 40}, &next, true);
  ASSERT_EQ(next.size(), 4u);
  for (int32_t id : next) EXPECT_TRUE(id >= 0 && id < config.vocab_size);
}

// The GDN b/a projection on the side stream (a branch of the step's graph, joined before the delta
// rule) gives the logits of running it in line (CudaModelOptions::side_stream off), bit for bit: the same kernel on
// the same inputs, at 8 sequences (the most it runs beside).
TEST_F(CudaModel, SideStreamBranchMatchesInLine) {
  const PrivatePlanCache plan_cache;
  Qwen35Config config = reduced_config("qwen3.5-27b", 4);  // three GDN layers and an attention one
  config.vocab_size = 2048;
  CudaModelOptions options;
  options.max_sequences = 8;
  options.max_context = 64;
  options.max_step_tokens = 8;
  std::vector<int32_t> tokens, positions;
  for (int32_t i = 0; i < 8; ++i) tokens.push_back(i + 1), positions.push_back(3 + 2 * i);
  std::vector<std::vector<float>> logits;
  for (bool side : {true, false}) {
    options.side_stream = side;
    Qwen35CudaModel model(config, synthetic_cuda_weights(config, true, 13), options, "synthetic");
    model.randomize_state(9);
    std::vector<int32_t> next;
    model.decode_step(tokens, positions, &next, true);
    logits.push_back(model.last_logits(8));
  }
  EXPECT_EQ(logits[0], logits[1]);
}

// Synthetic 35B-A3B (MoE) at real shapes, four layers: routed decode runs and yields valid ids.
TEST_F(CudaModel, SyntheticMoeDecode) {
  Qwen35Config config = reduced_config("qwen3.5-35b-a3b", 4);
  CudaModelOptions options;
  options.max_sequences = 8;
  options.max_context = 64;
  options.max_step_tokens = 8;
  Qwen35CudaModel model(config, synthetic_cuda_weights(config, true, 5), options, "synthetic moe");
  model.randomize_state(4);
  std::vector<int32_t> next;
  model.decode_step({1, 2, 3, 4, 5, 6, 7, 8}, {3, 5, 7, 9, 11, 13, 15, 17}, &next, true);
  ASSERT_EQ(next.size(), 8u);
  for (int32_t id : next) EXPECT_TRUE(id >= 0 && id < config.vocab_size);
}

// The golden qwen3_5_moe with its shared expert narrowed to `width` intermediate channels (its
// first ones; config and tensors), a model HF never ran: the CPU reference is its oracle.
void narrow_shared_expert(const testing::ScratchCheckpoint& checkpoint, int64_t width) {
  SafetensorsFile file(checkpoint.path("model.safetensors"));
  nlohmann::json header;
  std::string data;
  const auto ends_with = [](const std::string& name, const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const auto& entry : file.header().tensors) {
    ASSERT_EQ(entry.dtype, DType::kBF16) << entry.name;
    std::vector<int64_t> shape = entry.shape.to_vector();
    const char* bytes = static_cast<const char*>(file.data(entry));
    std::string kept;
    if (ends_with(entry.name, "shared_expert.gate_proj.weight") ||
        ends_with(entry.name, "shared_expert.up_proj.weight")) {
      kept.assign(bytes, size_t(width * shape[1] * 2));  // [width, H]: the first rows
      shape[0] = width;
    } else if (ends_with(entry.name, "shared_expert.down_proj.weight")) {
      for (int64_t row = 0; row < shape[0]; ++row) kept.append(bytes + row * shape[1] * 2, size_t(width * 2));
      shape[1] = width;  // [H, width]: the first columns
    } else {
      kept.assign(bytes, entry.end - entry.begin);
    }
    header[entry.name] = {
        {"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + kept.size()}}};
    data += kept;
  }
  checkpoint.write("model.safetensors", testing::safetensors_image(header.dump(), data));
  checkpoint.edit_config(
      [&](nlohmann::json& config) { config["text_config"]["shared_expert_intermediate_size"] = width; });
}

// A shared expert as wide as the routed ones is folded into their launches (stacked as expert E,
// its gate as router row E: CudaMoe::shared_folded): the CUDA forward (f32 activations) matches
// the CPU reference, which runs it as its own MLP, on prefill (7 and 150 tokens: the fused and the
// two-kernel router) and on greedy decode.
TEST_F(CudaModel, FoldedSharedExpertMatchesCpuReference) {
  testing::ScratchCheckpoint checkpoint("qwen3_5_moe");
  // The routed experts' width (32; the shared expert's is 48).
  const int64_t width =
      read_json_file(kGolden + "qwen3_5_moe/config.json")["text_config"]["moe_intermediate_size"].get<int64_t>();
  narrow_shared_expert(checkpoint, width);
  CudaModelOptions options = golden_options(DType::kF32);
  {
    const Qwen35CudaCheckpoint loaded = load_qwen35_cuda_checkpoint(checkpoint.dir(), options);
    int folded = 0;
    for (const auto& layer : loaded.weights.layers) {
      if (!layer.is_moe) continue;
      EXPECT_TRUE(layer.moe.shared_folded);
      EXPECT_EQ(layer.moe.stacked(), loaded.config.num_experts + 1);
      EXPECT_EQ(layer.moe.router.n, (loaded.config.num_experts + 1 + 3) / 4 * 4);  // padded rows
      folded += layer.moe.shared_folded;
    }
    ASSERT_GT(folded, 0);
  }
  auto cpu = load_model(checkpoint.dir(), {});
  auto cuda = load_qwen35_cuda(checkpoint.dir(), options);
  nlohmann::json reference = read_json_file(kGolden + "qwen3_5_moe/reference.json");
  for (const auto& prompt : reference["prompts"]) {
    auto ids = prompt["ids"].get<std::vector<int32_t>>();
    const int64_t len = int64_t(ids.size()), vocab = cpu->info().vocab_size;
    std::vector<std::vector<float>> logits;
    for (Model* model : {static_cast<Model*>(cpu.get()), static_cast<Model*>(cuda.get())}) {
      auto state = model->new_sequence(len);
      Buffer out(DType::kF32, {len, vocab});
      ForwardOptions all;
      all.all_logits = true;
      model->forward(ids, *state, out, all);
      logits.emplace_back(out.f32(), out.f32() + out.numel());
    }
    const double error = relative_l2(logits[1], logits[0]);
    std::printf("folded shared expert, prompt %lld: logits rel L2 vs CPU %.3g\n", (long long)len, error);
    EXPECT_LE(error, numerics::kLogitsRelL2) << len << " tokens";
    GenerateOptions generate_options;
    generate_options.max_new_tokens = 12;
    EXPECT_EQ(generate(*cuda, ids, generate_options).output_ids, generate(*cpu, ids, generate_options).output_ids)
        << len << " tokens";
  }
}

// The serving engine on the CUDA model: concurrent requests run as batched steps (prefill chunks
// and decode tokens mixed, all-decode steps through the CUDA graph of their batch size) and each
// gets HF's greedy tokens, as when run alone.
TEST_F(CudaModel, EngineBatchedStepsGiveHfGreedyTokens) {
  for (const char* name : {"qwen3_5_dense", "qwen3_5_moe"}) {
    CudaModelOptions options;
    options.activations = DType::kF32;
    options.max_sequences = 4;
    options.max_context = 256;  // the golden prompts are 7 and 150 tokens, plus 24 generated
    options.max_step_tokens = 64;
    options.max_logit_rows = 4;
    auto model = load_qwen35_cuda(kGolden + name, options);
    nlohmann::json reference = read_json_file(kGolden + name + "/reference.json");
    // Declared before the engine, so they outlive its thread (its destructor joins it).
    std::mutex mutex;
    std::condition_variable done;
    int finished = 0;
    std::vector<std::vector<int32_t>> outputs(reference["prompts"].size() * 2);
    std::vector<std::vector<int32_t>> wanted;
    EngineOptions engine_options;
    engine_options.max_running = 4;
    engine_options.step_token_budget = 64;
    engine_options.prefill_chunk = 16;  // several chunks per prompt, interleaved with decodes
    engine_options.cache_blocks = 64;
    Engine engine(*model, nullptr, engine_options);
    for (size_t r = 0; r < outputs.size(); ++r) {  // each prompt twice: 4 requests at once
      const auto& prompt = reference["prompts"][r % reference["prompts"].size()];
      wanted.push_back(prompt["greedy_ids"].get<std::vector<int32_t>>());
      RequestParams params;
      params.max_tokens = int64_t(wanted.back().size());
      engine.submit(prompt["ids"].get<std::vector<int32_t>>(), params, [&, r](const TokenEvent& event) {
        std::lock_guard<std::mutex> lock(mutex);
        if (event.token_id >= 0) outputs[r].push_back(event.token_id);
        if (event.finished) {
          EXPECT_TRUE(event.error.empty()) << event.error;
          ++finished;
          done.notify_all();
        }
      });
    }
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(done.wait_for(lock, std::chrono::seconds(120), [&] { return finished == int(outputs.size()); }));
    for (size_t r = 0; r < outputs.size(); ++r) EXPECT_EQ(outputs[r], wanted[r]) << name << " request " << r;
  }
}

// A forced GEMM backend that cannot serve a shape the model will run is refused at start-up,
// naming the shape (never a silent fallback): the M = 1 gemv kernel with 4 sequences.
TEST_F(CudaModel, ForcedGemmBackendThatCannotServeIsRefused) {
  Qwen35Config config = reduced_config("qwen3.5-27b", 1);
  config.vocab_size = 1024;
  CudaModelOptions options;
  options.max_sequences = 4;
  options.max_context = 64;
  options.max_step_tokens = 4;
  options.tune_gemms = false;
  setenv("VT_GEMM_BACKEND", "gemv", 1);
  try {
    Qwen35CudaModel model(config, synthetic_cuda_weights(config, true, 1), options, "synthetic");
    ADD_FAILURE() << "VT_GEMM_BACKEND=gemv at 4 sequences was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("cannot serve"), std::string::npos) << error.what();
  }
  unsetenv("VT_GEMM_BACKEND");
}

// The start-up tuning keeps, per shape and M bucket, a backend that serves it, and the model
// decodes with the tuned table to the same tokens as with the built-in rule.
TEST_F(CudaModel, TunedGemmPlanServesEveryBucket) {
  Qwen35Config config = reduced_config("qwen3.5-27b", 2);
  config.vocab_size = 2048;
  CudaModelOptions options;
  options.max_sequences = 16;
  options.max_context = 64;
  options.max_step_tokens = 16;
  setenv("VT_CACHE_DIR", ::testing::TempDir().c_str(), 1);
  std::vector<std::vector<float>> logits;
  for (bool tune : {true, false}) {
    options.tune_gemms = tune;
    Qwen35CudaModel model(config, synthetic_cuda_weights(config, true, 2), options, "synthetic");
    if (tune) {
      EXPECT_NE(model.gemm_plan().find("M<=1 "), std::string::npos) << model.gemm_plan();
      EXPECT_NE(model.gemm_plan().find("M<=16 "), std::string::npos) << model.gemm_plan();
    }
    model.randomize_state(3);
    std::vector<int32_t> next;
    model.decode_step({1}, {7}, &next, false);
    logits.push_back(model.last_logits(1));
  }
  unsetenv("VT_CACHE_DIR");
  // Backends sum in different orders and precisions (the wgmma kernels' block accumulator keeps
  // ~14 bits, tests/numerics.h), and the activations are re-quantised to e4m3 between layers,
  // which amplifies any difference: the W8A8 bound. Measured on the H200: 2.4e-2 with a plan that
  // chose wgmma at M = 1 (docs/perf/2026-12-01-gemm-splits-pdl.md), under 1e-2 with the GEMVs.
  EXPECT_LE(relative_l2(logits[0], logits[1]), numerics::kFp8W8A8RelL2);
}

// The FP8 output layer (quantised at load from the BF16 one) stays within the W8A8 bound of the
// BF16 output layer's logits, at the real 27B hidden size with a reduced vocabulary.
TEST_F(CudaModel, Fp8LmHeadWithinBound) {
  Qwen35Config config = reduced_config("qwen3.5-27b", 2);
  config.vocab_size = 8192 + 40;  // a partial last 128-row block
  CudaModelOptions options;
  options.max_sequences = 2;
  options.max_context = 64;
  options.max_step_tokens = 2;
  std::vector<std::vector<float>> logits;
  for (bool fp8_head : {false, true}) {
    options.fp8_lm_head = fp8_head;
    Qwen35CudaModel model(config, synthetic_cuda_weights(config, true, 21), options, "synthetic");
    model.randomize_state(6);
    std::vector<int32_t> next;
    model.decode_step({3, 4}, {5, 9}, &next, false);
    logits.push_back(model.last_logits(2));
  }
  const double error = relative_l2(logits[1], logits[0]);
  std::printf("fp8 lm_head vs bf16 lm_head: logits rel L2 %.3g\n", error);
  EXPECT_GT(error, 0.0);  // it did change the output layer
  EXPECT_LE(error, numerics::kFp8W8A8RelL2);
}

// The FP8 output layer with exact columns on the GPU against the CPU reference's (the same
// columns chosen, zero in the FP8 matrix, their product from the unquantised final hidden state),
// f32 activations on the fp32-summing GEMMs: as close as the plain FP8 output layer is to its CPU
// twin, and not the plain layer's logits.
TEST_F(CudaModel, Fp8LmHeadExactColumnsMatchTheCpuReference) {
  const std::string dir = kGolden + "qwen3_5_dense";
  nlohmann::json reference = read_json_file(dir + "/reference.json");
  const auto ids = reference["prompts"][1]["ids"].get<std::vector<int32_t>>();
  const int64_t len = int64_t(ids.size());
  const auto logits_of = [&](Model& model) {
    auto state = model.new_sequence(len);
    Buffer logits(DType::kF32, {len, model.info().vocab_size});
    ForwardOptions all;
    all.all_logits = true;
    model.forward(ids, *state, logits, all);
    return std::vector<float>(logits.f32(), logits.f32() + logits.numel());
  };
  CudaModelOptions options = golden_options(DType::kF32);
  std::map<int64_t, double> gpu_vs_cpu;
  std::map<int64_t, std::vector<float>> gpu_logits;
  for (int64_t exact : {int64_t(0), int64_t(8)}) {
    const Fp8Quantization quantization{Fp8Activations::kQuantized, 128, 128, exact};
    auto cpu = load_model(dir, {});
    cpu->quantize_lm_head_fp8(quantization);
    auto gpu = load_qwen35_cuda(dir, options);
    gpu->quantize_lm_head_fp8(quantization);
    gpu_logits[exact] = logits_of(*gpu);
    gpu_vs_cpu[exact] = relative_l2(gpu_logits[exact], logits_of(*cpu));
    std::printf("fp8 lm_head, %lld exact columns: GPU vs CPU logits rel L2 %.3g\n", (long long)exact, gpu_vs_cpu[exact]);
  }
  EXPECT_LE(gpu_vs_cpu[8], std::max(2.0 * gpu_vs_cpu[0], 1e-5));
  EXPECT_GT(relative_l2(gpu_logits[8], gpu_logits[0]), 10.0 * gpu_vs_cpu[8]);
  EXPECT_THROW(load_qwen35_cuda(dir, options)->quantize_lm_head_fp8({Fp8Activations::kQuantized, 128, 128, 12}), Error);
}

// The FP8 quantisation fused into norms, SwiGLU, the GDN output and the attention combine gives
// the logits, bit for bit, of quantising in front of each linear (CudaModelOptions::fuse_fp8_quantization off), on the real
// 27B and 35B-A3B layer shapes (where every fused path applies).
TEST_F(CudaModel, FusedQuantisationIsBitIdentical) {
  const PrivatePlanCache plan_cache;
  for (const char* name : {"qwen3.5-27b", "qwen3.5-35b-a3b"}) {
    Qwen35Config config = reduced_config(name, 4);
    CudaModelOptions options;
    options.max_sequences = 3;
    options.max_context = 64;
    options.max_step_tokens = 3;
    std::vector<std::vector<float>> logits;
    for (bool fused : {true, false}) {
      options.fuse_fp8_quantization = fused;
      Qwen35CudaModel model(config, synthetic_cuda_weights(config, true, 11), options, "synthetic");
      model.randomize_state(5);
      std::vector<int32_t> next;
      model.decode_step({5, 6, 7}, {9, 17, 40}, &next, false);
      logits.push_back(model.last_logits(3));
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_TRUE(logits[0] == logits[1]) << name << ": fused and unfused FP8 activations differ";
    double norm = 0;
    for (float v : logits[0]) norm += double(v) * v;
    EXPECT_GT(norm, 0.0) << name;
  }
}


// Issue 7 on the GPU, from CUPTI's records of a real step: with the fused FP8 quantisation
// disabled, the report names the quantise kernels that ran instead under the ops of the linears
// they feed; the kernel-ran gate passes on each step's own intents, and fails, naming them, when
// the unfused step's intents meet the fused step's kernels (what ran is not what was selected).
TEST_F(CudaModel, ProfileNamesTheUnfusedFallbackAndTheGateCatchesIt) {
  Qwen35Config config = reduced_config("qwen3.5-27b", 4);
  CudaModelOptions options;
  options.max_context = 64;
  options.max_step_tokens = 1;
  options.tune_gemms = false;
  struct Step {
    std::vector<trace::Intent> intents;
    std::vector<profile::KernelRecord> records;
  };
  std::map<std::string, Step> steps;
  for (const char* fused : {"1", "0"}) {
    options.fuse_fp8_quantization = std::string(fused) == "1";
    Qwen35CudaModel model(config, synthetic_cuda_weights(config, true, 11), options, "synthetic");
    std::vector<int32_t> next;
    model.decode_step({5}, {9}, &next, false);  // lazy module loads outside the window
    profile::KernelRecorder recorder;
    recorder.start();
    trace::begin_intents();
    model.decode_step({6}, {10}, &next, false);
    Step& step = steps[fused];
    step.intents = trace::end_intent_records();
    step.records = recorder.stop();
  }
  const auto quantise_rows = [](const Step& step) {
    const auto report = profile::build_step_report(profile::spans_from_kernels(step.records, step.intents), {1, 1e3, 1e3});
    std::string ops;
    for (const auto& row : report.rows)
      if (row.kernel == "sm90_fp8_quantize_rows") ops += row.ops + ";";
    return ops;
  };
  for (const auto& [fused, step] : steps) EXPECT_EQ(profile::kernel_gate_failure(step.intents, step.records, 1), "") << fused;
  EXPECT_EQ(quantise_rows(steps["1"]), "");
  const std::string fallback = quantise_rows(steps["0"]);
  for (const char* op : {"gdn.in_proj", "gdn.out_proj", "attn.qkv", "mlp.gate_up", "mlp.down"})
    EXPECT_NE(fallback.find(op), std::string::npos) << op << " not in " << fallback;
  const std::string failure = profile::kernel_gate_failure(steps["0"].intents, steps["1"].records, 1);
  EXPECT_NE(failure.find("intended kernel sm90_fp8_quantize_rows"), std::string::npos) << failure;
  EXPECT_NE(failure.find("but it ran 0 times"), std::string::npos) << failure;
}

// The kernel-ran gate on a captured CUDA graph: a graph of two ops (a norm, then SwiGLU, each
// recording its intent at capture) passes; the same graph with its SwiGLU node removed runs without
// it, and the gate names that kernel and its op.
TEST_F(CudaModel, GateNamesAKernelDroppedFromACapturedGraph) {
  const int64_t rows = 4, n = 200;  // not a multiple of 128: the plain kernels, no fused FP8 codes
  cuda::DeviceBuffer x(DType::kF32, {rows, n}), normed(DType::kF32, {rows, n}), weight(DType::kF32, {n});
  cuda::DeviceBuffer gate_up(DType::kF32, {rows, 2 * n}), out(DType::kF32, {rows, n});
  cudaStream_t stream = nullptr;
  VT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const cuda::DeviceBuffer* buffer : {&x, &weight, &gate_up})
    cuda::fill_random(buffer->data(), DType::kF32, buffer->shape().numel(), 7, 1.0f, 0.0f, stream);
  VT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto capture = [&](std::vector<trace::Intent>* intents) {
    trace::begin_intents();
    cudaGraph_t graph = nullptr;
    VT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    {
      trace::OpScope op("final_norm", trace::OpGroup::kNorm);
      cuda::rms_norm_f32(normed.as<float>(), x.as<float>(), weight.as<float>(), rows, n, 1e-6f, 1.0f, stream);
    }
    {
      trace::OpScope op("mlp.silu_mul", trace::OpGroup::kElementwise);
      cuda::silu_mul_f32(out.as<float>(), gate_up.as<float>(), rows, n, stream);
    }
    VT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    *intents = trace::end_intent_records();
    return graph;
  };
  const auto run = [&](cudaGraph_t graph) {
    cudaGraphExec_t exec = nullptr;
    VT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    profile::KernelRecorder recorder;
    recorder.start();
    VT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    VT_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<profile::KernelRecord> records = recorder.stop();
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return records;
  };
  std::vector<trace::Intent> intents;
  cudaGraph_t whole = capture(&intents);
  ASSERT_EQ(intents.size(), 2u);
  EXPECT_EQ(profile::kernel_gate_failure(intents, run(whole), 1), "");
  // The SwiGLU node is the one nothing depends on (the ops were captured in order).
  cudaGraph_t cut = capture(&intents);
  size_t count = 0;
  VT_CUDA_CHECK(cudaGraphGetNodes(cut, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  VT_CUDA_CHECK(cudaGraphGetNodes(cut, nodes.data(), &count));
  ASSERT_EQ(count, 2u);
  size_t last = count;
  for (size_t i = 0; i < count; ++i) {
    size_t dependents = 0;
    VT_CUDA_CHECK(cudaGraphNodeGetDependentNodes(nodes[i], nullptr, nullptr, &dependents));
    if (dependents == 0) last = i;
  }
  ASSERT_LT(last, count);
  VT_CUDA_CHECK(cudaGraphDestroyNode(nodes[last]));
  const std::string failure = profile::kernel_gate_failure(intents, run(cut), 1);
  EXPECT_NE(failure.find("intended kernel sm90_silu_mul"), std::string::npos) << failure;
  EXPECT_NE(failure.find("mlp.silu_mul"), std::string::npos) << failure;
  EXPECT_NE(failure.find("but it ran 0 times"), std::string::npos) << failure;
  EXPECT_EQ(failure.find("sm90_add_rms_norm 1 times"), std::string::npos) << "the norm ran: " << failure;
  VT_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace vt
