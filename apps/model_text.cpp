// Model loading with a progress bar, and the text side of a GGUF file or an HF model folder.
#include "apps/model_text.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/gguf_tokenizer.h"

namespace vt::apps {

std::unique_ptr<Model> load_model_with_progress(const std::string& path, LoadOptions options) {
  const bool terminal = ::isatty(STDERR_FILENO) != 0;
  const std::string name = std::filesystem::path(path).filename().string();
  const auto start = std::chrono::steady_clock::now();
  int drawn = -1;
  uint64_t total_bytes = 0;
  if (terminal) {
    options.progress = [&](uint64_t done, uint64_t total) {
      total_bytes = total;
      const int percent = total ? int(done * 100 / total) : 100;
      if (percent == drawn) return;
      drawn = percent;
      constexpr int kWidth = 30;
      const int filled = percent * kWidth / 100;
      std::fprintf(stderr, "\rloading %s [%s%s] %3d%%", name.c_str(), std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, '.').c_str(), percent);
      std::fflush(stderr);
    };
  } else {
    options.progress = [&](uint64_t, uint64_t total) { total_bytes = total; };
  }
  auto model = load_model(path, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (terminal) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "loaded %s", name.c_str());
  if (total_bytes) std::fprintf(stderr, " (%.0f MB)", double(total_bytes) / 1e6);
  std::fprintf(stderr, " in %.1f s\n", seconds);
  return model;
}

ModelText load_model_text(const std::string& path) {
  ModelText text;
  if (is_gguf_path(path)) {
    GgufFile file(path);
    text.tokenizer = load_gguf_tokenizer(file);
    if (file.has("tokenizer.chat_template")) text.chat_templates = gguf_chat_templates(file);
    text.stop_ids = gguf_special_tokens(file).stop_ids();
    return text;
  }
  text.tokenizer = Tokenizer::load(path);
  try {
    text.chat_templates = jinja::load_chat_templates(path);
  } catch (const Error&) {
    // No chat template: generate and eval still work; chat says so when asked.
  }
  const std::string& eos = text.tokenizer->config().eos_token;
  if (!eos.empty() && text.tokenizer->token_to_id(eos) >= 0) text.stop_ids.push_back(text.tokenizer->token_to_id(eos));
  text.generation = load_generation_config(path);
  // HF generate and vLLM stop on each of these; an id the tokenizer lacks is never produced as text.
  for (int32_t id : text.generation.eos_token_ids)
    if (id < text.tokenizer->vocab_size() &&
        std::find(text.stop_ids.begin(), text.stop_ids.end(), id) == text.stop_ids.end())
      text.stop_ids.push_back(id);
  return text;
}

std::vector<int32_t> parse_prompt_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      VT_FAIL("--prompt-ids: '", item, "' is not an integer");
    }
    VT_CHECK(used == item.size() && value >= 0 && value <= INT32_MAX, "--prompt-ids: '", item,
             "' is not a valid token id");
    ids.push_back(int32_t(value));
  }
  VT_CHECK(!ids.empty(), "--prompt-ids: no ids given");
  return ids;
}

}  // namespace vt::apps
