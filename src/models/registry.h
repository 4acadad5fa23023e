// Opens an HF model folder (or a GGUF file) and builds the model its config names.
#pragma once

#include <memory>
#include <string>

#include "model/linear.h"
#include "model/model.h"

namespace vt {

struct LoadOptions {
  Fp8Activations fp8_activations = Fp8Activations::kQuantized;
  LoadProgress progress;  // optional
  bool load_mtp = false;  // the checkpoint's MTP head too (Qwen3.5 family; --speculative mtp)
};

// `path` is an HF model folder or a .gguf file (architecture 'llama').
// Throws vt::Error for a missing folder, an unreadable config or an unknown architecture.
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options);

}  // namespace vt
