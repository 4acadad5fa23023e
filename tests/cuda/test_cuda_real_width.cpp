// Real-width FP8 goldens (tests/golden/real_width/<case>: Qwen3.5-27B and 35B-A3B layer widths,
// made on the GPU machine by scripts/gpu/real_width.sh, too large to commit) on the CUDA model as
// `vt serve --device cuda` runs it: its options and engine (engine/cuda_serving.h: bf16
// activations, the GEMM mix tuned at start-up, the decode steps' CUDA graphs), against HF
// transformers' float32 W8A8. The bounds come from the noise floor recorded with the reference
// (numerics::kRealWidthFloorFactor, docs/numerics.md), fixed before any run. Without the folder
// the test skips; the GPU script counts a skip as a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../numerics.h"
#include "cuda_test_support.h"
#include "engine_test_support.h"
#include "engine/cuda_serving.h"
#include "engine/engine.h"
#include "io/json_config.h"
#include "runtime/qwen3_5_cuda.h"

namespace vt {
namespace {

using testing::read_f32;
using testing::relative_l2;

const std::string kRealWidth = std::string(VT_SOURCE_DIR) + "/tests/golden/real_width/";

// The floor the served arithmetic sets: HF's W8A8 with bf16 activations vs float32, the largest of
// the case's prompts (one prompt's floor is a single draw: the 1-token prompt's a single row).
struct Floor {
  double all_positions = 0, last_position = 0, max_abs = 0;
};

Floor served_floor(const nlohmann::json& reference) {
  Floor floor;
  for (const auto& prompt : reference["noise_floor"]["w8a8_bf16"]) {
    floor.all_positions = std::max(floor.all_positions, prompt["logits_rel_l2"].get<double>());
    floor.last_position = std::max(floor.last_position, prompt["last_logits_rel_l2"].get<double>());
    floor.max_abs = std::max(floor.max_abs, prompt["logits_max_abs_diff"].get<double>());
  }
  return floor;
}

size_t first_diff_or(const nlohmann::json& floor, size_t all) {
  return floor["first_greedy_diff"].is_number() ? floor["first_greedy_diff"].get<size_t>() : all;
}

// Greedy steps a served run must reproduce: those before the reference's own first difference
// under the served arithmetic and under float64 (past either, HF's answer depends on rounding), and
// before the first step whose float32 top1 - top2 margin a logit moving by the bound's share of
// the floor's largest move (kRealWidthFloorFactor x max |d logit|) could close.
size_t checked_steps(const nlohmann::json& reference, size_t prompt, double max_move) {
  const auto& entry = reference["modes"]["w8a8"]["prompts"][prompt];
  const auto margins = entry["margins"].get<std::vector<double>>();
  size_t steps = std::min(first_diff_or(reference["noise_floor"]["w8a8_bf16"][prompt], margins.size()),
                          first_diff_or(reference["noise_floor"]["w8a8"][prompt], margins.size()));
  for (size_t s = 0; s < steps; ++s)
    if (margins[s] < max_move) return s;
  return steps;
}

size_t argmax_differs(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
  size_t count = 0;
  for (size_t row = 0; row * size_t(vocab) < a.size(); ++row) {
    const auto at = [&](const std::vector<float>& v) {
      const auto begin = v.begin() + std::ptrdiff_t(row * size_t(vocab));
      return std::max_element(begin, begin + vocab) - begin;
    };
    count += at(a) != at(b);
  }
  return count;
}

class CudaRealWidth : public testing::GpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(CudaRealWidth, ServedConfigurationWithinTheFloorBound) {
  const std::string dir = kRealWidth + GetParam();
  if (!std::filesystem::exists(dir + "/reference.json"))
    GTEST_SKIP() << dir << " is absent: scripts/gpu/real_width.sh makes it (scripts/golden/make_real_width_goldens.py)";
  const nlohmann::json reference = read_json_file(dir + "/reference.json");
  const auto& prompts = reference["modes"]["w8a8"]["prompts"];
  const auto& served_prompts = reference["modes"]["w8a8_bf16"]["prompts"];
  ASSERT_EQ(prompts.size(), served_prompts.size());
  ASSERT_EQ(prompts.size(), reference["noise_floor"]["w8a8_bf16"].size());
  ASSERT_EQ(prompts.size(), reference["noise_floor"]["w8a8"].size());

  // The bounds, from the recorded floor alone.
  const Floor floor = served_floor(reference);
  const double bound_all = numerics::kRealWidthFloorFactor * floor.all_positions;
  const double bound_last = numerics::kRealWidthFloorFactor * floor.last_position;
  const double max_move = numerics::kRealWidthFloorFactor * floor.max_abs;
  std::printf("real-width %s: floor (HF bf16 vs f32 W8A8) all positions %.3g, last position %.3g, max |d logit| %.3g; "
              "bounds %.3g / %.3g\n",
              GetParam().c_str(), floor.all_positions, floor.last_position, floor.max_abs, bound_all, bound_last);
  EXPECT_LE(bound_all, numerics::kRealWidthMeaningfulRelL2) << "the floor leaves no room to tell a broken GEMM from noise";
  EXPECT_LE(bound_last, numerics::kRealWidthMeaningfulRelL2) << "the floor leaves no room to tell a broken GEMM from noise";

  // vt serve's configuration on one GPU with its default flags.
  EngineOptions engine_options;
  engine_options.prefill_chunk = kCudaPrefillChunk;
  engine_options.step_token_budget = cuda_step_token_budget(engine_options.prefill_chunk, engine_options.max_running);
  engine_options.max_prompt_chunks_per_step = serving_prompt_chunks_per_step(engine_options, /*batch_invariant=*/false);
  engine_options.admission_watermark_blocks = -1;
  engine_options.device_sampling = true;
  engine_options.prefix_cache = true;
  const int64_t max_context = 4096;  // --max-context's default
  CudaModelOptions options =
      cuda_serving_options(engine_options, max_context, cuda_default_cache_tokens(max_context), /*own_pool=*/true);
  size_t longest = 0;
  for (const auto& prompt : prompts) longest = std::max(longest, prompt["ids"].size());
  // Room for a whole prompt's logits (the served steps ask for the last rows only): the output
  // buffer grows, no step's arithmetic changes.
  options.max_logit_rows = std::max(options.max_logit_rows, int64_t(longest));
  auto model = load_qwen35_cuda(dir, options);
  model->warm_up();  // as vt serve before it serves: the decode steps' graphs
  const int64_t vocab = model->info().vocab_size;

  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto ids = prompts[p]["ids"].get<std::vector<int32_t>>();
    const int64_t len = int64_t(ids.size());
    const auto golden = read_f32(dir + "/" + prompts[p]["logits_file"].get<std::string>());
    const auto served = read_f32(dir + "/" + served_prompts[p]["logits_file"].get<std::string>());
    ASSERT_EQ(golden.size(), size_t(len * vocab));
    ASSERT_EQ(served.size(), golden.size());

    std::vector<float> all;
    {
      auto state = model->new_sequence(len);
      Buffer logits(DType::kF32, {len, vocab});
      ForwardOptions every_row;
      every_row.all_logits = true;
      model->forward(ids, *state, logits, every_row);
      all.assign(logits.f32(), logits.f32() + logits.numel());
    }
    std::vector<float> last;
    {  // the last row alone, as a served prefill asks for it
      auto state = model->new_sequence(len);
      Buffer logits(DType::kF32, {1, vocab});
      model->forward(ids, *state, logits, {});
      last.assign(logits.f32(), logits.f32() + vocab);
    }
    const std::vector<float> golden_last(golden.end() - vocab, golden.end());
    const double error_all = relative_l2(all, golden), error_last = relative_l2(last, golden_last);
    std::printf("real-width %s prompt %zu (%lld tokens): logits rel L2 %.3g (bound %.3g), last position %.3g "
                "(bound %.3g); vs HF's served arithmetic %.3g; prompt positions whose argmax differs: %zu "
                "(HF bf16: %d)\n",
                GetParam().c_str(), p, (long long)len, error_all, bound_all, error_last, bound_last,
                relative_l2(all, served), argmax_differs(all, golden, vocab),
                reference["noise_floor"]["w8a8_bf16"][p]["prompt_positions_argmax_differs"].get<int>());
    EXPECT_LE(error_all, bound_all) << "prompt " << p;
    EXPECT_LE(error_last, bound_last) << "prompt " << p;
  }

  // Greedy continuations through vt serve's engine: every prompt a request, all at once (batched
  // prefill and decode steps; all-decode steps replay their CUDA graph), sampled on the device.
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<RequestParams> params(prompts.size());  // greedy
  for (size_t p = 0; p < prompts.size(); ++p) {
    prompt_ids.push_back(prompts[p]["ids"].get<std::vector<int32_t>>());
    params[p].max_tokens = int64_t(prompts[p]["greedy_ids"].size());
  }
  const auto outcomes = testing::run_all(*model, engine_options, prompt_ids, params);
  std::vector<std::vector<int32_t>> outputs;
  for (const auto& outcome : outcomes) {
    EXPECT_TRUE(outcome.last.error.empty()) << outcome.last.error;
    outputs.push_back(outcome.ids);
  }
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto want = prompts[p]["greedy_ids"].get<std::vector<int32_t>>();
    size_t equal = 0;
    while (equal < outputs[p].size() && equal < want.size() && outputs[p][equal] == want[equal]) ++equal;
    const size_t checked = checked_steps(reference, p, max_move);
    std::printf("real-width %s prompt %zu: greedy ids equal to HF f32 for %zu of %zu steps (%zu checked; "
                "HF bf16 parts at %s, float64 at %s)\n",
                GetParam().c_str(), p, equal, want.size(), checked,
                reference["noise_floor"]["w8a8_bf16"][p]["first_greedy_diff"].dump().c_str(),
                reference["noise_floor"]["w8a8"][p]["first_greedy_diff"].dump().c_str());
    EXPECT_GE(equal, checked) << "prompt " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaRealWidth, ::testing::Values("qwen3_5_27b_fp8", "qwen3_5_35b_a3b_fp8"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace vt
