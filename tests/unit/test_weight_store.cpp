// Bad checkpoints get a clear error naming the file and tensor, never a crash or a silent load.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "checkpoint_fixture.h"
#include "core/error.h"
#include "io/weight_store.h"
#include "models/registry.h"

namespace vt {
namespace {

using testing::ScratchCheckpoint;

void expect_load_error(const std::string& dir, std::initializer_list<std::string> fragments) {
  try {
    load_model(dir, {});
    FAIL() << "model loaded despite the corruption";
  } catch (const Error& error) {
    std::string message = error.what();
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

TEST(WeightStore, LoadsSingleAndShardedCheckpoints) {
  auto single = WeightStore::open(std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_dense");
  EXPECT_TRUE(single.contains("model.embed_tokens.weight"));
  auto sharded = WeightStore::open(std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_next");
  EXPECT_TRUE(sharded.contains("lm_head.weight"));
  EXPECT_GT(sharded.names().size(), 10u);
}

TEST(WeightStore, TruncatedFile) {
  ScratchCheckpoint checkpoint("qwen3_5_dense");
  std::string bytes = checkpoint.read("model.safetensors");
  checkpoint.write("model.safetensors", bytes.substr(0, bytes.size() - 100));
  expect_load_error(checkpoint.dir(), {"model.safetensors", "truncated"});
}

TEST(WeightStore, ShapeDisagreesWithConfig) {
  ScratchCheckpoint checkpoint("qwen3_5_dense");
  checkpoint.edit_config([](nlohmann::json& config) { config["intermediate_size"] = 96; });
  expect_load_error(checkpoint.dir(), {"model.safetensors", "mlp.gate_proj.weight", "has shape [128, 64]",
                                       "[96, 64]"});
}

TEST(WeightStore, DtypeDisagrees) {
  ScratchCheckpoint checkpoint("qwen3_5_dense");
  checkpoint.edit_header("model.safetensors",
                         [](nlohmann::json& header) { header["model.norm.weight"]["dtype"] = "I16"; });
  expect_load_error(checkpoint.dir(), {"model.safetensors", "'model.norm.weight'", "dtype i16"});
}

TEST(WeightStore, MissingTensor) {
  ScratchCheckpoint checkpoint("qwen3_5_dense");
  checkpoint.edit_header("model.safetensors", [](nlohmann::json& header) {
    header["model.norm_renamed.weight"] = header["model.norm.weight"];
    header.erase("model.norm.weight");
  });
  expect_load_error(checkpoint.dir(), {"missing tensor 'model.norm.weight'"});
}

TEST(WeightStore, UnconsumedTensor) {
  ScratchCheckpoint checkpoint("qwen3_5_dense");
  std::string bytes = checkpoint.read("model.safetensors");
  checkpoint.edit_header(
      "model.safetensors",
      [&](nlohmann::json& header) {
        uint64_t end = 0;
        for (auto& [name, entry] : header.items())
          if (name != "__metadata__") end = std::max(end, entry["data_offsets"][1].get<uint64_t>());
        header["model.layers.0.mystery.weight"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {end, end + 8}}};
      },
      std::string(8, '\0'));
  expect_load_error(checkpoint.dir(), {"not consumed", "'model.layers.0.mystery.weight'", "model.safetensors"});
}

TEST(WeightStore, UnknownArchitecture) {
  ScratchCheckpoint checkpoint("qwen3_5_dense");
  checkpoint.edit_config([](nlohmann::json& config) { config["architectures"] = {"FooForCausalLM"}; });
  expect_load_error(checkpoint.dir(), {"config.json", "unknown architecture 'FooForCausalLM'"});
}

TEST(WeightStore, ShardMissing) {
  ScratchCheckpoint checkpoint("qwen3_next");
  std::filesystem::remove(checkpoint.path("model-00002-of-00004.safetensors"));
  expect_load_error(checkpoint.dir(), {"model-00002-of-00004.safetensors", "does not exist"});
}

TEST(WeightStore, IndexDisagreesWithShards) {
  ScratchCheckpoint checkpoint("qwen3_next");
  auto index = nlohmann::json::parse(checkpoint.read("model.safetensors.index.json"));
  index["weight_map"]["lm_head.weight"] = "model-00001-of-00004.safetensors";
  index["weight_map"]["model.ghost.weight"] = "model-00001-of-00004.safetensors";
  checkpoint.write("model.safetensors.index.json", index.dump());
  try {
    WeightStore::open(checkpoint.dir());
    FAIL() << "inconsistent index accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("index"), std::string::npos) << error.what();
  }
}

TEST(WeightStore, NotAModelFolder) {
  expect_load_error("/nonexistent-vt-model", {"/nonexistent-vt-model", "config.json"});
}

TEST(WeightStore, Fp8WeightWithoutQuantizationConfig) {
  ScratchCheckpoint checkpoint("qwen3_5_fp8");
  checkpoint.edit_config([](nlohmann::json& config) { config.erase("quantization_config"); });
  expect_load_error(checkpoint.dir(), {"is FP8 but config.json has no fp8 quantization_config"});
}

TEST(WeightStore, Fp8ScaleWithWrongShape) {
  ScratchCheckpoint checkpoint("qwen3_5_fp8");
  checkpoint.edit_config([](nlohmann::json& config) {
    config["quantization_config"]["weight_block_size"] = {64, 64};
  });
  expect_load_error(checkpoint.dir(), {"weight_scale_inv", "has shape"});
}

TEST(WeightStore, VisionTowerAndMtpAreDeclaredIgnored) {
  auto model = load_model(std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_vl", {});
  EXPECT_NE(model->describe().find("ignored: model.visual."), std::string::npos);
}

}  // namespace
}  // namespace vt
