#include "models/registry.h"

#include <filesystem>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json_config.h"
#include "models/llama/model.h"
#include "models/qwen3_5/model.h"

namespace vt {

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options) {
  if (is_gguf_path(dir)) {
    VT_CHECK(!options.load_mtp, dir, ": a GGUF (llama) model has no MTP head");
    return std::make_unique<LlamaModel>(dir, options.progress);
  }
  const std::string config_path = dir + "/config.json";
  if (!std::filesystem::exists(config_path)) VT_FAIL(dir, ": no config.json (not an HF model folder?)");
  nlohmann::json json = read_json_file(config_path);
  JsonObject root(json, config_path);
  auto architectures = root.get_strings("architectures");
  VT_CHECK(!architectures.empty(), config_path, ": 'architectures' is empty");
  const std::string& architecture = architectures[0];
  if (is_qwen35_architecture(architecture)) {
    Qwen35LoadOptions qwen_options;
    qwen_options.fp8_activations = options.fp8_activations;
    qwen_options.load_mtp = options.load_mtp;
    return std::make_unique<Qwen35Model>(dir, qwen_options);
  }
  VT_FAIL(config_path, ": unknown architecture '", architecture,
          "' (supported: Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5MoeForCausalLM, "
          "Qwen3_5MoeForConditionalGeneration, Qwen3NextForCausalLM)");
}

}  // namespace vt
