// libFuzzer target for the tokenizer. The first byte picks what the rest of the input is:
//   0      a tokenizer.json: it loads, or throws vt::Error; a loaded one encodes a sample text
//   1      token ids (2 bytes each): decode gives valid UTF-8 and the streaming detokenizer agrees
//   other  text for two tokenizers (byte-level with Qwen's regex, Llama-style char BPE with byte
//          fallback): decode(encode(x)) == x with invalid UTF-8 replaced (no normalizer), output is
//          valid UTF-8, and the streaming detokenizer's pieces add up to decode().
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

std::string read_fixture(const char* name) {
  std::ifstream in(std::string(VT_SOURCE_DIR) + "/tests/tokenizer/data/" + name, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (buffer.str().empty()) std::abort();
  return buffer.str();
}

struct Tokenizers {
  std::unique_ptr<vt::Tokenizer> byte_level, byte_level_raw, llama_style;
  Tokenizers() {
    const std::string byte_level_json = read_fixture("tiny_byte_level.json");
    byte_level = vt::Tokenizer::from_json_text(byte_level_json, "tiny_byte_level.json");
    // Without its NFC normalizer the byte-level tokenizer must give the text back byte for byte.
    nlohmann::json raw = nlohmann::json::parse(byte_level_json);
    raw["normalizer"] = nullptr;
    byte_level_raw =
        vt::Tokenizer::from_json_text(raw.dump(), "tiny_byte_level.json (no normalizer)");
    llama_style =
        vt::Tokenizer::from_json_text(read_fixture("llama_style.json"), "llama_style.json");
  }
};

void check_stream(const vt::Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                  bool skip_special) {
  vt::StreamingDetokenizer stream(tokenizer, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    if (!vt::utf8::is_valid(piece)) std::abort();
    streamed += piece;
  }
  streamed += stream.finish();
  if (streamed != tokenizer.decode(ids, skip_special)) std::abort();
}

void check_text(const vt::Tokenizer& tokenizer, std::string_view text, bool exact_round_trip) {
  const std::vector<int32_t> ids = tokenizer.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
  const std::string decoded = tokenizer.decode(ids);
  if (!vt::utf8::is_valid(decoded)) std::abort();
  if (exact_round_trip && decoded != vt::utf8::replace_invalid(text)) std::abort();
  check_stream(tokenizer, ids, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizers tokenizers;
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 0) {
    try {
      auto tokenizer = vt::Tokenizer::from_json_text(rest, "fuzz.json");
      check_text(*tokenizer, "Hello wörld 123 <s> \xF0\x9F\x98\x80", false);
    } catch (const vt::Error&) {
    }
    return 0;
  }
  if (data[0] == 1) {
    for (const vt::Tokenizer* tokenizer :
         {tokenizers.byte_level.get(), tokenizers.llama_style.get()}) {
      std::vector<int32_t> ids;
      for (size_t i = 0; i + 1 < rest.size(); i += 2)
        ids.push_back(int32_t((uint8_t(rest[i]) | (uint8_t(rest[i + 1]) << 8)) %
                              (tokenizer->vocab_size() + 8)));
      if (!vt::utf8::is_valid(tokenizer->decode(ids))) std::abort();
      check_stream(*tokenizer, ids, false);
      check_stream(*tokenizer, ids, true);
    }
    return 0;
  }
  check_text(*tokenizers.byte_level, rest, false);
  check_text(*tokenizers.byte_level_raw, rest, true);
  check_text(*tokenizers.llama_style, rest, false);
  return 0;
}
