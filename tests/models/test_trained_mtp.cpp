// The trained MTP heads of the trained small models (mtp.* in tests/golden/<folder>/, trained by
// scripts/golden/train_mtp_head.py with the base frozen) on vt's CPU reference against that
// script's PyTorch head (mtp_reference.json): HF transformers has no MTP head, so the script writes
// vt's definition (src/models/qwen3_5/mtp.cpp) with HF's decoder layer, norms, rotary embedding
// and the base's embed / lm_head, and records, for one held-out prompt, the top-16 logits of every
// pair (hidden at p, token at p + 1) and of two chained drafts (the head's own output with its own
// argmax), checked by trained_mtp_check.h. The CUDA twin is tests/cuda/test_cuda_trained.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../numerics.h"
#include "trained_mtp_check.h"
#include "io/json_config.h"
#include "models/qwen3_5/model.h"

namespace vt {
namespace {

std::string dir_of(const std::string& folder) { return std::string(VT_SOURCE_DIR) + "/tests/golden/" + folder; }

class TrainedMtp : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainedMtp, HeadLogitsMatchPyTorch) {
  const std::string dir = dir_of(GetParam());
  const auto reference = read_json_file(dir + "/mtp_reference.json");
  Qwen35LoadOptions options;
  options.load_mtp = true;
  Qwen35Model model(dir, options);
  ASSERT_TRUE(model.has_mtp());
  const int64_t vocab = model.info().vocab_size;

  const auto ids = reference["ids"].get<std::vector<int32_t>>();
  const auto& pairs = reference["pairs"];
  ASSERT_EQ(pairs.size() + 1, ids.size());
  model.set_keep_hidden_states(true);
  auto target = model.new_sequence(int64_t(ids.size()));
  Buffer logits(DType::kF32, {1, vocab});
  model.forward(ids, *target, logits, {});

  auto head = model.new_mtp_sequence(int64_t(ids.size()) + 4);
  testing::MtpRowCheck check;
  for (size_t p = 0; p + 1 < ids.size(); ++p) {
    SCOPED_TRACE("pair " + std::to_string(p));
    model.mtp_forward_from_target(std::span<const int32_t>(&ids[p + 1], 1), int64_t(p), *head, logits);
    testing::check_mtp_row(logits.f32(), vocab, pairs[p], check);
  }
  for (const auto& step : reference["chained"]) {
    SCOPED_TRACE("chained draft");
    const int32_t token = step["token"].get<int32_t>();
    // The script chains on its own argmax; vt's previous row must pick the same token.
    EXPECT_EQ(int32_t(std::max_element(logits.f32(), logits.f32() + vocab) - logits.f32()), token);
    model.mtp_forward_chained(token, *head, logits);
    testing::check_mtp_row(logits.f32(), vocab, step, check);
  }
  std::printf("%s MTP head: %zu pairs + %zu chained, max |logit - PyTorch| %.3g, %d argmaxes checked\n",
              GetParam().c_str(), pairs.size(), reference["chained"].size(), check.worst, check.argmax_checked);
}

INSTANTIATE_TEST_SUITE_P(Folders, TrainedMtp, ::testing::Values("qwen3_5_trained", "qwen3_5_moe_trained"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace vt
