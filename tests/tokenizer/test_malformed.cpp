// Malformed tokenizer files must fail with a vt::Error that names the file and the field, never
// crash or load half a tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;

json valid_tokenizer() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 5, "content": "<s>", "special": true, "normalized": false}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\s+|\\S+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "post_processor": {"type": "ByteLevel"},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "c": 4}, "merges": [["a", "b"]]}})");
}

// Loads `mutated` and expects an error containing every one of `parts`.
void expect_error(const std::function<void(json&)>& mutate, std::vector<std::string> parts) {
  json file = valid_tokenizer();
  mutate(file);
  try {
    vt::Tokenizer::from_json_text(file.dump(), "bad.json");
    FAIL() << "loaded without error: " << file.dump().substr(0, 300);
  } catch (const vt::Error& error) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(error.what()).find(part), std::string::npos)
          << "message: " << error.what();
  }
}

TEST(MalformedTokenizer, ValidBaseLoads) {
  auto tokenizer = vt::Tokenizer::from_json_text(valid_tokenizer().dump(), "good.json");
  EXPECT_EQ(tokenizer->encode("ab c<s>"), (std::vector<int32_t>{2, 3, 4, 5}));
}

TEST(MalformedTokenizer, NotJson) {
  for (const std::string text : {"", "not json", "{\"model\": ", "[1, 2", "{\"a\": \"\xFF\"}"}) {
    try {
      vt::Tokenizer::from_json_text(text, "bad.json");
      FAIL() << "parsed: " << text;
    } catch (const vt::Error& error) {
      EXPECT_NE(std::string(error.what()).find("bad.json: not valid JSON"), std::string::npos)
          << error.what();
    }
  }
  // A file cut in half.
  const std::string whole = valid_tokenizer().dump();
  EXPECT_THROW(vt::Tokenizer::from_json_text(whole.substr(0, whole.size() / 2), "bad.json"),
               vt::Error);
}

TEST(MalformedTokenizer, Structure) {
  expect_error([](json& f) { f = json::array(); }, {"bad.json", "expected a JSON object"});
  expect_error([](json& f) { f.erase("model"); }, {"missing field 'model'"});
  expect_error([](json& f) { f["model"]["type"] = "WordPiece"; }, {"model.type", "only BPE"});
  expect_error([](json& f) { f["model"]["vocab"] = json::array(); },
               {"model.vocab", "expected an object"});
  expect_error([](json& f) { f["model"]["vocab"]["x"] = -3; }, {"vocab[\"x\"]", "non-negative"});
  expect_error([](json& f) { f["model"]["vocab"]["x"] = "one"; }, {"vocab[\"x\"]"});
  expect_error([](json& f) { f["model"]["vocab"]["x"] = 1; }, {"id 1 is given to both"});
  expect_error(
      [](json& f) {
        f["model"]["merges"].push_back({"a", "zz"});
      },
      {"merges[1]", "'zz' is not in the vocabulary"});
  expect_error([](json& f) { f["model"]["merges"].push_back("ab"); },
               {"merges[1]", "not two tokens"});
  expect_error([](json& f) { f["model"]["merges"].push_back("a b c"); }, {"merges[1]"});
  expect_error([](json& f) { f["model"]["merges"].push_back({"b", "a"}); }, {"merged token 'ba'"});
  expect_error([](json& f) { f["model"]["merges"].push_back(7); }, {"merges[1]"});
  expect_error([](json& f) { f["model"]["merges"] = "a b"; }, {"model.merges: expected an array"});
  expect_error([](json& f) { f["model"]["unk_token"] = "<unk>"; },
               {"unk_token", "not in the vocabulary"});
  expect_error([](json& f) { f["model"]["dropout"] = 0.1; }, {"dropout"});
  expect_error([](json& f) { f["model"]["continuing_subword_prefix"] = "##"; },
               {"continuing_subword_prefix"});
}

TEST(MalformedTokenizer, Components) {
  expect_error(
      [](json& f) {
        f["normalizer"] = {{"type", "Lowercase"}};
      },
      {"normalizer", "'Lowercase' is not supported"});
  expect_error(
      [](json& f) {
        f["normalizer"] = {{"kind", "NFC"}};
      },
      {"normalizer", "missing field 'type'"});
  expect_error(
      [](json& f) {
        f["pre_tokenizer"] = {{"type", "Whitespace"}};
      },
      {"pre_tokenizer", "'Whitespace'"});
  expect_error(
      [](json& f) {
        f["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
      },
      {"regex '(unclosed'"});
  expect_error([](json& f) { f["pre_tokenizer"]["pretokenizers"][0]["pattern"] = "\\s+"; },
               {"pattern"});
  expect_error([](json& f) { f["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
               {"Sideways"});
  expect_error(
      [](json& f) {
        std::swap(f["pre_tokenizer"]["pretokenizers"][0], f["pre_tokenizer"]["pretokenizers"][1]);
      },
      {"ByteLevel pre-tokenizer followed by"});
  expect_error([](json& f) { f["added_tokens"] = {{"a", 1}}; }, {"added_tokens"});
  expect_error([](json& f) { f["added_tokens"][0].erase("id"); },
               {"added_tokens[0]", "missing field 'id'"});
  expect_error([](json& f) { f["added_tokens"][0]["content"] = ""; }, {"added_tokens[0].content"});
  expect_error([](json& f) { f["added_tokens"][0]["special"] = "yes"; },
               {"added_tokens[0].special"});
  expect_error([](json& f) { f["decoder"] = {{"type", "WordPiece"}}; }, {"decoder", "'WordPiece'"});
  expect_error(
      [](json& f) {
        f["decoder"] = {{"type", "Strip"}, {"content", "ab"}, {"start", 1}, {"stop", 0}};
      },
      {"decoder.content", "one character"});
  expect_error(
      [](json& f) {
        f["post_processor"] = {{"type", "RobertaProcessing"}};
      },
      {"post_processor", "RobertaProcessing"});
  expect_error(
      [](json& f) {
        f["post_processor"] = json::parse(
            R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}],
                                          "pair": [], "special_tokens": {}})");
      },
      {"post_processor.special_tokens", "<bos>"});
  // Deep nesting is refused, not recursed into.
  expect_error(
      [](json& f) {
        json nested = {{"type", "NFC"}};
        for (int i = 0; i < 200; ++i)
          nested = {{"type", "Sequence"}, {"normalizers", json::array({nested})}};
        f["normalizer"] = nested;
      },
      {"nested too deeply"});
}

TEST(MalformedTokenizer, Files) {
  const auto folder = std::filesystem::temp_directory_path() / "vt_tokenizer_malformed";
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  try {
    vt::Tokenizer::load(folder.string());
    FAIL();
  } catch (const vt::Error& error) {
    EXPECT_NE(std::string(error.what()).find("tokenizer.json: not found"), std::string::npos)
        << error.what();
  }
  std::ofstream(folder / "tokenizer.json") << valid_tokenizer().dump();
  std::ofstream(folder / "tokenizer_config.json") << "{\"eos_token\": ";
  try {
    vt::Tokenizer::load(folder.string());
    FAIL();
  } catch (const vt::Error& error) {
    EXPECT_NE(std::string(error.what()).find("tokenizer_config.json: not valid JSON"),
              std::string::npos)
        << error.what();
  }
  std::ofstream(folder / "tokenizer_config.json")
      << R"({"eos_token": {"content": "<s>"}, "chat_template": [{"name": "tool", "template": "T"}, {"name": "default", "template": "D"}]})";
  auto tokenizer = vt::Tokenizer::load(folder.string());
  EXPECT_EQ(tokenizer->config().eos_token, "<s>");
  EXPECT_EQ(tokenizer->config().chat_template, "D");
  std::filesystem::remove_all(folder);
}

}  // namespace
