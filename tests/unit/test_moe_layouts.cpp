// MoE experts load from either checkpoint layout: per expert (experts.{e}.gate_proj.weight ...,
// what save_pretrained writes) or fused 3-D (experts.gate_up_proj [E, 2I, H], experts.down_proj
// [E, H, I], how transformers holds them in memory). Both must give the same model.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <regex>

#include "checkpoint_fixture.h"
#include "io/safetensors.h"
#include "models/registry.h"

namespace vt {
namespace {

using testing::ScratchCheckpoint;

struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Rewrites the checkpoint with each layer's experts fused into two 3-D tensors.
void fuse_experts(const ScratchCheckpoint& checkpoint) {
  SafetensorsFile file(checkpoint.path("model.safetensors"));
  std::map<std::string, RawTensor> tensors;
  for (const auto& entry : file.header().tensors) {
    DType dtype = entry.dtype;
    ASSERT_EQ(dtype, DType::kBF16) << entry.name;
    tensors[entry.name] = {"BF16", entry.shape.to_vector(),
                           std::string(static_cast<const char*>(file.data(entry)), entry.end - entry.begin)};
  }
  const std::regex expert(R"((.*\.mlp\.experts\.)(\d+)\.(gate|up|down)_proj\.weight)");
  std::map<std::string, std::map<int, std::map<std::string, std::string>>> per_layer;  // prefix -> e -> kind -> bytes
  std::map<std::string, std::map<std::string, std::vector<int64_t>>> shapes;
  for (auto it = tensors.begin(); it != tensors.end();) {
    std::smatch match;
    if (std::regex_match(it->first, match, expert)) {
      per_layer[match[1]][std::stoi(match[2])][match[3]] = it->second.bytes;
      shapes[match[1]][match[3]] = it->second.shape;
      it = tensors.erase(it);
    } else {
      ++it;
    }
  }
  ASSERT_FALSE(per_layer.empty());
  for (auto& [prefix, experts] : per_layer) {
    const int64_t count = int64_t(experts.size()), inter = shapes[prefix]["gate"][0], hidden = shapes[prefix]["gate"][1];
    RawTensor gate_up{"BF16", {count, 2 * inter, hidden}, ""}, down{"BF16", {count, hidden, inter}, ""};
    for (auto& [e, parts] : experts) {
      gate_up.bytes += parts["gate"] + parts["up"];
      down.bytes += parts["down"];
    }
    tensors[prefix + "gate_up_proj"] = gate_up;
    tensors[prefix + "down_proj"] = down;
  }
  nlohmann::json header;
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    header[name] = {{"dtype", tensor.dtype}, {"shape", tensor.shape}, {"data_offsets", {data.size(), data.size() + tensor.bytes.size()}}};
    data += tensor.bytes;
  }
  checkpoint.write("model.safetensors", testing::safetensors_image(header.dump(), data));
}

std::vector<float> last_logits(const std::string& dir, const std::vector<int32_t>& ids) {
  auto model = load_model(dir, {});
  auto state = model->new_sequence(int64_t(ids.size()));
  Buffer logits(DType::kF32, {1, model->info().vocab_size});
  model->forward(ids, *state, logits, {});
  return {logits.f32(), logits.f32() + logits.numel()};
}

TEST(MoeLayouts, FusedExpertsEqualPerExpert) {
  ScratchCheckpoint checkpoint("qwen3_5_moe");
  const std::vector<int32_t> ids = {3, 141, 59, 26, 5, 35, 89, 79, 32, 38};
  auto per_expert = last_logits(checkpoint.dir(), ids);
  fuse_experts(checkpoint);
  {
    SafetensorsFile fused(checkpoint.path("model.safetensors"));
    ASSERT_NE(fused.find("model.language_model.layers.0.mlp.experts.gate_up_proj"), nullptr);
    ASSERT_EQ(fused.find("model.language_model.layers.0.mlp.experts.0.gate_proj.weight"), nullptr);
  }
  auto fused = last_logits(checkpoint.dir(), ids);
  EXPECT_EQ(fused, per_expert);  // same weights, same arithmetic: bit-identical
}

}  // namespace
}  // namespace vt
