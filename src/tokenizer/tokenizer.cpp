// Loading tokenizer.json into the pipeline (added tokens -> normalizer -> pre-tokenizer -> BPE ->
// post-processor; decoder for the way back) and running it.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace vt {
namespace {

constexpr uint8_t kKnown = 1, kSpecial = 2;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  VT_CHECK(in, path.string(), ": cannot open");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

nlohmann::json parse_json(std::string_view text, const std::string& name) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& error) {
    VT_FAIL(name, ": not valid JSON: ", error.what());
  }
}

// tokenizer_config.json writes a token as "text", {"content": "text", ...} or null.
std::string config_token(const nlohmann::json& config, const char* key) {
  auto found = config.find(key);
  if (found == config.end() || found->is_null()) return "";
  if (found->is_string()) return found->get<std::string>();
  if (found->is_object() && found->contains("content") && (*found)["content"].is_string())
    return (*found)["content"].get<std::string>();
  VT_FAIL("tokenizer_config.json: ", key, ": expected a string or {\"content\": ...}");
}

TokenizerConfig read_config(const std::filesystem::path& folder) {
  TokenizerConfig config;
  const auto config_path = folder / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const nlohmann::json json = parse_json(read_file(config_path), config_path.string());
    VT_CHECK(json.is_object(), config_path.string(), ": expected a JSON object");
    try {
      config.bos_token = config_token(json, "bos_token");
      config.eos_token = config_token(json, "eos_token");
      config.pad_token = config_token(json, "pad_token");
      config.unk_token = config_token(json, "unk_token");
      config.add_bos_token = json_bool_or(json, "add_bos_token", false, config_path.string());
      config.add_eos_token = json_bool_or(json, "add_eos_token", false, config_path.string());
      if (auto found = json.find("chat_template"); found != json.end() && !found->is_null()) {
        if (found->is_string()) {
          config.chat_template = found->get<std::string>();
        } else {
          // A list of named templates: "default" if there is one, else the first.
          VT_CHECK(found->is_array() && !found->empty(), config_path.string(),
                   ": chat_template: expected a string or a list of {name, template}");
          const nlohmann::json* chosen = &(*found)[0];
          for (const auto& entry : *found)
            if (entry.is_object() && entry.value("name", "") == "default") chosen = &entry;
          config.chat_template =
              json_string(*chosen, "template", config_path.string() + ": chat_template[]");
        }
      }
    } catch (const nlohmann::json::exception& error) {
      VT_FAIL(config_path.string(), ": ", error.what());
    }
  }
  const auto template_path = folder / "chat_template.jinja";
  if (std::filesystem::exists(template_path)) config.chat_template = read_file(template_path);
  return config;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(file)) file /= "tokenizer.json";
  VT_CHECK(std::filesystem::exists(file), file.string(),
           ": not found (a tokenizer folder needs tokenizer.json)");
  auto tokenizer = from_json_text(read_file(file), file.string());
  tokenizer->config_ = read_config(file.parent_path());
  return tokenizer;
}

std::unique_ptr<Tokenizer> Tokenizer::from_json_text(std::string_view json_text,
                                                     const std::string& name) {
  const nlohmann::json root = parse_json(json_text, name);
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  Tokenizer& self = *tokenizer;
  try {
    VT_CHECK(root.is_object(), name, ": expected a JSON object");
    if (auto found = root.find("normalizer"); found != root.end() && !found->is_null())
      self.normalizer_ = Normalizer::from_json(*found, name + ": normalizer");
    if (auto found = root.find("pre_tokenizer"); found != root.end() && !found->is_null())
      self.pre_tokenizer_ = PreTokenizer::from_json(*found, name + ": pre_tokenizer");
    self.model_ = BpeModel::from_json(json_field(root, "model", name), name + ": model",
                                      self.pre_tokenizer_.byte_level());

    std::vector<AddedToken> added;
    if (auto found = root.find("added_tokens"); found != root.end() && !found->is_null()) {
      VT_CHECK(found->is_array(), name, ": added_tokens: expected an array");
      for (size_t i = 0; i < found->size(); ++i) {
        const auto& entry = (*found)[i];
        const std::string where = str(name, ": added_tokens[", i, "]");
        AddedToken token;
        const int64_t id = json_int(entry, "id", where);
        VT_CHECK(id >= 0 && id < INT32_MAX, where, ".id: out of range");
        token.id = int32_t(id);
        token.content = json_string(entry, "content", where);
        VT_CHECK(!token.content.empty() && utf8::is_valid(token.content), where,
                 ".content: empty or not UTF-8");
        token.single_word = json_bool_or(entry, "single_word", false, where);
        token.lstrip = json_bool_or(entry, "lstrip", false, where);
        token.rstrip = json_bool_or(entry, "rstrip", false, where);
        token.normalized = json_bool_or(entry, "normalized", false, where);
        token.special = json_bool_or(entry, "special", false, where);
        added.push_back(std::move(token));
      }
    }
    self.added_.build(std::move(added), self.normalizer_.empty() ? nullptr : &self.normalizer_);
    self.vocab_size_ = int32_t(self.model_.size());
    for (const AddedToken& token : self.added_.tokens())
      self.vocab_size_ = std::max(self.vocab_size_, token.id + 1);

    if (auto found = root.find("post_processor"); found != root.end() && !found->is_null()) {
      std::vector<const nlohmann::json*> processors{&*found};
      const std::string where = name + ": post_processor";
      if (json_string(*found, "type", where) == "Sequence") {
        processors.clear();
        for (const auto& processor : json_array(*found, "processors", where))
          processors.push_back(&processor);
      }
      for (const nlohmann::json* processor : processors) {
        const std::string type = json_string(*processor, "type", where);
        if (type == "ByteLevel") continue;  // only moves offsets, which vt does not report
        VT_CHECK(type == "TemplateProcessing", where, ": type '", type,
                 "' is not supported (supported: ByteLevel, TemplateProcessing, Sequence)");
        VT_CHECK(self.template_single_.empty(), where, ": more than one TemplateProcessing");
        const auto& special_tokens = json_field(*processor, "special_tokens", where);
        for (const auto& item : json_array(*processor, "single", where)) {
          if (item.contains("Sequence")) {
            VT_CHECK(json_string(item["Sequence"], "id", where + ".single") == "A", where,
                     ".single: a single-sequence template can only use $A");
            self.template_single_.emplace_back();
            self.template_is_sequence_.push_back(true);
            continue;
          }
          const std::string special =
              json_string(json_field(item, "SpecialToken", where + ".single"), "id", where);
          const auto& entry =
              json_field(special_tokens, special.c_str(), where + ".special_tokens");
          std::vector<int32_t> ids;
          for (const auto& id : json_array(entry, "ids", where + ".special_tokens." + special)) {
            VT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                         id.get<int64_t>() < self.vocab_size_,
                     where, ".special_tokens.", special, ": id out of the vocabulary");
            ids.push_back(int32_t(id.get<int64_t>()));
          }
          self.template_single_.push_back(std::move(ids));
          self.template_is_sequence_.push_back(false);
        }
      }
    }
    self.decoder_ = Decoder::from_json(
        root.contains("decoder") ? root["decoder"] : nlohmann::json(), name + ": decoder");
  } catch (const nlohmann::json::exception& error) {
    VT_FAIL(name, ": ", error.what());
  }
  self.prepare_decoding();
  return tokenizer;
}

void Tokenizer::prepare_decoding() {
  id_flags_.assign(size_t(vocab_size_), 0);
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (added_.find(id) == nullptr && !model_.has_id(id)) continue;
    // HF tests the token's text, so a vocabulary token spelled like a special token counts too.
    const int32_t added = added_.find(token_text(id));
    id_flags_[size_t(id)] = kKnown | ((added >= 0 && added_.find(added)->special) ? kSpecial : 0);
  }
  bytes_per_token_ = decoder_.bytes_per_token();
  if (!bytes_per_token_) return;
  byte_offsets_.assign(size_t(vocab_size_) + 1, 0);
  std::string bytes;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    byte_offsets_[size_t(id)] = uint32_t(byte_arena_.size());
    const bool known = added_.find(id) != nullptr || model_.has_id(id);
    if (known && !decoder_.token_bytes(token_text(id), bytes)) {
      // One token outside the shape (e.g. fused with a non-alphabet character): decode through
      // the decoder chain instead, for every id.
      bytes_per_token_ = false;
      byte_offsets_.clear();
      byte_arena_.clear();
      return;
    }
    if (known) byte_arena_ += bytes;
  }
  byte_offsets_[size_t(vocab_size_)] = uint32_t(byte_arena_.size());
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (const AddedToken* token = added_.find(id)) return token->content;
  return model_.id_to_token(id);
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  const int32_t added = added_.find(token);
  return added >= 0 ? added : model_.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  VT_CHECK(added_.find(id) != nullptr || model_.has_id(id), "token id ", id,
           " is not in the vocabulary (size ", vocab_size_, ")");
  return token_text(id);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size_ && (id_flags_[size_t(id)] & kSpecial) != 0;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (!bytes_per_token_ || id < 0 || id >= vocab_size_) return {};
  const uint32_t begin = byte_offsets_[size_t(id)], end = byte_offsets_[size_t(id) + 1];
  return std::string_view(byte_arena_).substr(begin, end - begin);
}

bool Tokenizer::decodes_to_text(int32_t id, bool skip_special_tokens) const {
  if (id < 0 || id >= vocab_size_) return false;
  const uint8_t flags = id_flags_[size_t(id)];
  return (flags & kKnown) != 0 && !(skip_special_tokens && (flags & kSpecial) != 0);
}

bool Tokenizer::is_byte_token(int32_t id) const {
  return (added_.find(id) != nullptr || model_.has_id(id)) &&
         decoder_.is_byte_token(token_text(id));
}

void Tokenizer::encode_pieces(std::string_view text, std::vector<int32_t>& ids,
                              BpeCache* cache) const {
  thread_local std::string buffer;
  thread_local std::vector<Span> pieces;
  buffer.assign(text);
  pieces.clear();
  pre_tokenizer_.split(buffer, pieces);
  for (const Span& piece : pieces)
    model_.tokenize(std::string_view(buffer).substr(piece.begin, piece.end - piece.begin), ids,
                    cache);
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& ids,
                            BpeCache* cache) const {
  thread_local std::string normalized;
  std::string_view input = text;
  if (!normalizer_.empty()) {
    normalizer_.normalize(text, normalized);
    input = normalized;
  }
  if (!added_.has_normalized_tokens()) {
    encode_pieces(input, ids, cache);
    return;
  }
  std::vector<TextSegment> segments;  // rare: only files with normalized added tokens get here
  added_.split(input, /*normalized_set=*/true, /*skip_special=*/false, segments);
  for (const TextSegment& segment : segments) {
    if (segment.token_id >= 0)
      ids.push_back(segment.token_id);
    else
      encode_pieces(input.substr(segment.span.begin, segment.span.end - segment.span.begin), ids,
                    cache);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::string sanitized;
  if (!utf8::is_valid(text)) {
    sanitized = utf8::replace_invalid(text);
    text = sanitized;
  }
  // The cache is shared; a thread that finds it busy works without it rather than waiting.
  std::unique_lock<std::mutex> lock(cache_mutex_, std::try_to_lock);
  BpeCache* cache = lock.owns_lock() ? &cache_ : nullptr;

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  thread_local std::vector<TextSegment> segments;
  segments.clear();
  added_.split(text, /*normalized_set=*/false, options.split_special_tokens, segments);
  for (const TextSegment& segment : segments) {
    if (segment.token_id >= 0)
      ids.push_back(segment.token_id);
    else
      encode_text(text.substr(segment.span.begin, segment.span.end - segment.span.begin), ids,
                  cache);
  }
  if (!options.add_special_tokens || template_single_.empty()) return ids;
  std::vector<int32_t> out;
  out.reserve(ids.size() + 4);
  for (size_t i = 0; i < template_single_.size(); ++i) {
    if (template_is_sequence_[i])
      out.insert(out.end(), ids.begin(), ids.end());
    else
      out.insert(out.end(), template_single_[i].begin(), template_single_[i].end());
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  // Ids outside the vocabulary are dropped, as HF does (a model's padded vocabulary can sample
  // them).
  auto keep = [&](int32_t id) { return decodes_to_text(id, skip_special_tokens); };
  if (bytes_per_token_) {
    std::string bytes;
    for (int32_t id : ids)
      if (keep(id)) bytes += token_bytes(id);
    return utf8::replace_invalid(bytes);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids)
    if (keep(id)) tokens.push_back(token_text(id));
  return decoder_.decode(std::move(tokens));
}

}  // namespace vt
