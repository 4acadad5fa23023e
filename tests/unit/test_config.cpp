// config.json parsing: every supported layout, both RoPE spellings, clear errors.
#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint_fixture.h"
#include "core/error.h"
#include "models/qwen3_5/config.h"

namespace vt {
namespace {

using testing::ScratchCheckpoint;
const std::string kGolden = std::string(VT_SOURCE_DIR) + "/tests/golden/";

TEST(Config, DenseText) {
  auto config = parse_qwen35_config(kGolden + "qwen3_5_dense/config.json");
  EXPECT_EQ(config.variant, Qwen35Variant::kQwen35);
  EXPECT_EQ(config.weight_prefix, "model.");
  EXPECT_EQ(config.num_layers, 4);
  EXPECT_EQ(config.layer_types[3], LayerKind::kFullAttention);
  EXPECT_EQ(config.layer_types[0], LayerKind::kLinearAttention);
  EXPECT_EQ(config.rotary_dim, config.head_dim / 4);
  EXPECT_FALSE(config.fp8.has_value());
}

TEST(Config, VisionLanguageNestsTextConfig) {
  auto config = parse_qwen35_config(kGolden + "qwen3_5_vl/config.json");
  EXPECT_TRUE(config.has_vision_tower);
  EXPECT_EQ(config.weight_prefix, "model.language_model.");
  EXPECT_EQ(config.hidden_size, 64);
}

TEST(Config, MoeAndNext) {
  auto moe = parse_qwen35_config(kGolden + "qwen3_5_moe/config.json");
  EXPECT_EQ(moe.variant, Qwen35Variant::kQwen35Moe);
  EXPECT_EQ(moe.num_experts, 8);
  EXPECT_TRUE(moe.layer_is_moe(0));
  auto next = parse_qwen35_config(kGolden + "qwen3_next/config.json");
  EXPECT_EQ(next.variant, Qwen35Variant::kQwen3Next);
  EXPECT_FALSE(next.layer_is_moe(1));  // mlp_only_layers = [1]
  EXPECT_TRUE(next.layer_is_moe(0));
}

TEST(Config, Fp8Quantization) {
  auto config = parse_qwen35_config(kGolden + "qwen3_5_fp8/config.json");
  ASSERT_TRUE(config.fp8.has_value());
  EXPECT_EQ(config.fp8->block_n, 128);
  EXPECT_EQ(config.fp8->block_k, 128);
}

TEST(Config, OlderRopeSpelling) {
  ScratchCheckpoint checkpoint("qwen3_5_dense");
  checkpoint.edit_config([](nlohmann::json& config) {
    config.erase("rope_parameters");
    config["rope_theta"] = 5000000.0;
    config["partial_rotary_factor"] = 0.5;
  });
  auto config = parse_qwen35_config(checkpoint.path("config.json"));
  EXPECT_EQ(config.rope.theta, 5000000.0f);
  EXPECT_EQ(config.rope.factor, 1.0f);
  EXPECT_EQ(config.rotary_dim, config.head_dim / 2);
}

// YaRN as the family's model cards enable it (rope_parameters: factor 4 over the native 262,144
// positions) and in the older rope_scaling spelling: HF's defaults (beta 32 / 1, attention factor
// 0.1 ln(factor) + 1, truncated ramp), and what a checkpoint sets explicitly.
TEST(Config, YarnFromRopeParameters) {
  ScratchCheckpoint checkpoint("qwen3_5_dense");
  checkpoint.edit_config([](nlohmann::json& config) {
    config["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25},
                                 {"factor", 4.0}, {"original_max_position_embeddings", 262144},
                                 {"mrope_section", {11, 11, 10}}, {"mrope_interleaved", true}};
  });
  auto config = parse_qwen35_config(checkpoint.path("config.json"));
  EXPECT_EQ(config.rope.theta, 1e7f);
  EXPECT_EQ(config.rope.factor, 4.0f);
  EXPECT_FLOAT_EQ(config.rope.attention_factor, float(0.1 * std::log(4.0) + 1.0));
  // rotary dim 8 (head 32 x 0.25): the dims that turn 32 and 1 times over 262,144 positions at
  // theta 1e7, floor / ceil: 8 ln(262144 / (32 * 2 pi)) / (2 ln 1e7) = 1.78 -> 1; 8 ln(262144 /
  // (2 pi)) / (2 ln 1e7) = 2.64 -> 3.
  EXPECT_EQ(config.rope.ramp_low, 1.0f);
  EXPECT_EQ(config.rope.ramp_span, 2.0f);
  EXPECT_EQ(rope_inv_freq(config.rope, 1, 8), 1.0f / std::pow(1e7f, 2.0f / 8.0f));  // kept
  EXPECT_FLOAT_EQ(rope_inv_freq(config.rope, 3, 8), 1.0f / (4.0f * std::pow(1e7f, 6.0f / 8.0f)));  // interpolated

  checkpoint.edit_config([](nlohmann::json& config) {
    config.erase("rope_parameters");
    config["rope_theta"] = 1e6;
    config["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 4096},
                              {"attention_factor", 1.5}, {"beta_fast", 16}, {"beta_slow", nullptr}};
  });
  config = parse_qwen35_config(checkpoint.path("config.json"));
  EXPECT_EQ(config.rope.theta, 1e6f);
  EXPECT_EQ(config.rope.factor, 2.0f);
  EXPECT_EQ(config.rope.attention_factor, 1.5f);
}

void expect_config_error(const std::function<void(nlohmann::json&)>& edit, const std::string& fragment) {
  ScratchCheckpoint checkpoint("qwen3_5_dense");
  checkpoint.edit_config(edit);
  try {
    parse_qwen35_config(checkpoint.path("config.json"));
    FAIL() << "accepted a bad config";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("config.json"), std::string::npos) << error.what();
  }
}

TEST(Config, Errors) {
  expect_config_error([](auto& c) { c.erase("hidden_size"); }, "missing required key 'hidden_size'");
  expect_config_error([](auto& c) { c["hidden_size"] = "big"; }, "hidden_size: expected an integer");
  expect_config_error([](auto& c) { c["num_key_value_heads"] = 3; }, "not a multiple");
  expect_config_error([](auto& c) { c["layer_types"][0] = "mamba"; }, "unknown layer type 'mamba'");
  expect_config_error([](auto& c) { c["rope_parameters"]["rope_type"] = "linear"; }, "'linear' is not supported");
  expect_config_error(
      [](auto& c) {
        c["rope_parameters"]["rope_type"] = "yarn";
        c["rope_parameters"]["factor"] = 0.5;
      },
      "factor 0.5 must be at least 1");
  expect_config_error([](auto& c) { c["quantization_config"] = {{"quant_method", "awq"}}; }, "'awq' is not supported");
  expect_config_error([](auto& c) { c["num_hidden_layers"] = -4; }, "out of range");
}

}  // namespace
}  // namespace vt
