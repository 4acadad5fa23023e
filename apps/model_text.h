// What the text commands (generate --prompt, chat, eval perplexity) share: loading a model with a
// progress bar on stderr, and the model's text side (tokenizer, chat template, stop tokens) from
// its GGUF metadata or its HF folder's tokenizer files.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jinja/chat_template.h"
#include "model/model.h"
#include "models/generation_config.h"
#include "models/registry.h"
#include "tokenizer/tokenizer.h"

namespace vt::apps {

// load_model() with a progress bar on stderr (a terminal) or one closing line (otherwise).
std::unique_ptr<Model> load_model_with_progress(const std::string& path, LoadOptions options = {});

struct ModelText {
  std::unique_ptr<Tokenizer> tokenizer;
  jinja::ChatTemplateSet chat_templates;  // empty templates: the model has none
  std::vector<int32_t> stop_ids;          // end-of-sequence / end-of-turn ids (generation_config.json's too)
  GenerationConfig generation;            // an HF folder's generation_config.json (empty for GGUF)
};

ModelText load_model_text(const std::string& path);

// --prompt-ids "1,2,3": token ids, each a non-negative int32 (vt::Error otherwise, or if none).
std::vector<int32_t> parse_prompt_ids(const std::string& text);

}  // namespace vt::apps
