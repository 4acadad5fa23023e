// generation_config.json as HF writes it: end-of-sequence ids (one or a list) and sampling defaults.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "models/generation_config.h"

namespace vt {
namespace {

class GenerationConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("vt_generation_config_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& text) { std::ofstream(dir_ / "generation_config.json") << text; }
  std::filesystem::path dir_;
};

TEST_F(GenerationConfigTest, AQwenInstructConfig) {
  write(R"({"bos_token_id": 248044, "do_sample": true, "eos_token_id": [248046, 248044], "pad_token_id": 248044,
            "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.57.0"})");
  const GenerationConfig config = load_generation_config(dir_);
  EXPECT_EQ(config.eos_token_ids, (std::vector<int32_t>{248046, 248044}));
  ASSERT_TRUE(config.has_sampling());
  const SamplingParams sampling = config.sampling_over({.seed = 3});
  EXPECT_FLOAT_EQ(sampling.temperature, 0.6f);
  EXPECT_EQ(sampling.top_k, 20);
  EXPECT_FLOAT_EQ(sampling.top_p, 0.95f);
  EXPECT_EQ(sampling.seed, 3u);
  EXPECT_EQ(config.sampling_summary(), "temperature=0.6 top_k=20 top_p=0.95");
}

TEST_F(GenerationConfigTest, WhatItLeavesOutStaysAsItWas) {
  write(R"({"eos_token_id": 0, "temperature": null, "top_p": 0.8, "use_cache": true})");
  const GenerationConfig config = load_generation_config(dir_);
  EXPECT_EQ(config.eos_token_ids, (std::vector<int32_t>{0}));
  const SamplingParams sampling = config.sampling_over({.temperature = 0.0f, .top_k = 5});
  EXPECT_EQ(sampling.temperature, 0.0f);
  EXPECT_EQ(sampling.top_k, 5);
  EXPECT_FLOAT_EQ(sampling.top_p, 0.8f);
  EXPECT_EQ(config.sampling_summary(), "top_p=0.8");

  // vLLM also reads min_p and repetition_penalty.
  write(R"({"min_p": 0.05, "repetition_penalty": 1.05})");
  const GenerationConfig more = load_generation_config(dir_);
  ASSERT_TRUE(more.has_sampling());
  EXPECT_FLOAT_EQ(more.sampling_over({}).min_p, 0.05f);
  EXPECT_FLOAT_EQ(more.repetition_penalty.value_or(0.0f), 1.05f);
  EXPECT_EQ(more.sampling_summary(), "min_p=0.05 repetition_penalty=1.05");

  write(R"({"_from_model_config": true, "use_cache": true})");
  EXPECT_FALSE(load_generation_config(dir_).has_sampling());
  EXPECT_TRUE(load_generation_config(dir_).eos_token_ids.empty());
  std::filesystem::remove(dir_ / "generation_config.json");
  EXPECT_FALSE(load_generation_config(dir_).has_sampling());
}

TEST_F(GenerationConfigTest, BadValuesNameTheKey) {
  for (const char* text : {R"({"top_p": 0})", R"({"top_p": 1.5})", R"({"temperature": -1})", R"({"top_k": -2})",
                           R"({"top_k": 0.5})", R"({"eos_token_id": "2"})", R"({"eos_token_id": [-1]})",
                           R"({"min_p": 2})", R"({"repetition_penalty": 0})"}) {
    write(text);
    EXPECT_THROW(load_generation_config(dir_), Error) << text;
  }
  write("{not json");
  EXPECT_THROW(load_generation_config(dir_), Error);
}

}  // namespace
}  // namespace vt
