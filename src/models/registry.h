// Opens an HF model folder and builds the model its config.json names.
#pragma once

#include <memory>
#include <string>

#include "model/linear.h"
#include "model/model.h"

namespace vt {

struct LoadOptions {
  Fp8Activations fp8_activations = Fp8Activations::kQuantized;
};

// Throws vt::Error for a missing folder, an unreadable config or an unknown architecture.
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options);

}  // namespace vt
