// GGUF tokenizer metadata -> tokenizer.json (fed to vt's own loader) and chat template set.
#include "tokenizer/gguf_tokenizer.h"

#include "core/error.h"

namespace vt {
namespace {

constexpr int64_t kTokenTypeControl = 3;      // llama.cpp's LLAMA_TOKEN_TYPE_CONTROL
constexpr int64_t kTokenTypeUserDefined = 4;  // LLAMA_TOKEN_TYPE_USER_DEFINED

int32_t optional_id(const GgufFile& file, const std::string& key, size_t vocab) {
  if (!file.has(key)) return -1;
  const int64_t id = file.get_int(key);
  VT_CHECK(id >= 0 && uint64_t(id) < vocab, file.path(), ": ", key, " = ", id, " is outside the vocabulary of ",
           vocab, " tokens");
  return int32_t(id);
}

}  // namespace

nlohmann::json gguf_tokenizer_json(const GgufFile& file) {
  const std::string model = file.get_string("tokenizer.ggml.model");
  VT_CHECK(model == "gpt2", file.path(), ": tokenizer.ggml.model is '", model,
           "'; vt reads byte-level BPE ('gpt2') vocabularies from GGUF");
  const std::vector<std::string> tokens = file.get_strings("tokenizer.ggml.tokens");
  const std::vector<std::string> merges = file.get_strings("tokenizer.ggml.merges");
  std::vector<int64_t> types(tokens.size(), 1);
  if (file.has("tokenizer.ggml.token_type")) {
    types = file.get_ints("tokenizer.ggml.token_type");
    VT_CHECK(types.size() == tokens.size(), file.path(), ": tokenizer.ggml.token_type has ", types.size(),
             " entries for ", tokens.size(), " tokens");
  }

  nlohmann::json vocab = nlohmann::json::object();
  for (size_t id = 0; id < tokens.size(); ++id) {
    VT_CHECK(!vocab.contains(tokens[id]), file.path(), ": token '", tokens[id], "' appears twice (ids ",
             vocab[tokens[id]].get<int64_t>(), " and ", id, ")");
    vocab[tokens[id]] = id;
  }
  nlohmann::json merge_pairs = nlohmann::json::array();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const size_t space = merges[rank].find(' ');
    VT_CHECK(space != std::string::npos && space > 0 && space + 1 < merges[rank].size() &&
                 merges[rank].find(' ', space + 1) == std::string::npos,
             file.path(), ": tokenizer.ggml.merges[", rank, "] '", merges[rank], "' is not two tokens");
    merge_pairs.push_back({merges[rank].substr(0, space), merges[rank].substr(space + 1)});
  }
  nlohmann::json added = nlohmann::json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] != kTokenTypeControl && types[id] != kTokenTypeUserDefined) continue;
    added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", types[id] == kTokenTypeControl}});
  }
  const int32_t unknown = optional_id(file, "tokenizer.ggml.unknown_token_id", tokens.size());

  nlohmann::json json = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", nlohmann::json::array()}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", nlohmann::json::object()}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", unknown >= 0 ? nlohmann::json(tokens[unknown]) : nlohmann::json(nullptr)},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", std::move(vocab)},
        {"merges", std::move(merge_pairs)}}},
  };
  return json;
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& file) {
  std::string text;
  try {
    text = gguf_tokenizer_json(file).dump();
  } catch (const nlohmann::json::exception& error) {
    VT_FAIL(file.path(), ": tokenizer metadata is not valid UTF-8 text: ", error.what());
  }
  return Tokenizer::from_json_text(text, file.path() + " (tokenizer.ggml.*)");
}

std::vector<int32_t> GgufSpecialTokens::stop_ids() const {
  std::vector<int32_t> ids;
  if (eos >= 0) ids.push_back(eos);
  if (eot >= 0 && eot != eos) ids.push_back(eot);
  return ids;
}

GgufSpecialTokens gguf_special_tokens(const GgufFile& file) {
  const size_t vocab = file.value("tokenizer.ggml.tokens").array.size();
  GgufSpecialTokens special;
  special.bos = optional_id(file, "tokenizer.ggml.bos_token_id", vocab);
  special.eos = optional_id(file, "tokenizer.ggml.eos_token_id", vocab);
  special.eot = optional_id(file, "tokenizer.ggml.eot_token_id", vocab);
  special.unknown = optional_id(file, "tokenizer.ggml.unknown_token_id", vocab);
  special.padding = optional_id(file, "tokenizer.ggml.padding_token_id", vocab);
  if (file.has("tokenizer.ggml.add_bos_token")) special.add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
  return special;
}

jinja::ChatTemplateSet gguf_chat_templates(const GgufFile& file) {
  VT_CHECK(file.has("tokenizer.chat_template"), file.path(), ": GGUF metadata has no tokenizer.chat_template");
  jinja::ChatTemplateSet set;
  set.templates["default"] = file.get_string("tokenizer.chat_template");
  set.origin = file.path() + " (tokenizer.chat_template)";
  const std::vector<std::string> tokens = file.get_strings("tokenizer.ggml.tokens");
  const GgufSpecialTokens special = gguf_special_tokens(file);
  const std::pair<const char*, int32_t> named[] = {
      {"bos_token", special.bos}, {"eos_token", special.eos}, {"unk_token", special.unknown}, {"pad_token", special.padding}};
  for (const auto& [name, id] : named)
    if (id >= 0) set.special_tokens.set(name, jinja::Value(tokens[id]));
  return set;
}

}  // namespace vt
