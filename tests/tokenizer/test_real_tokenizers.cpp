// vt against HF `tokenizers` on the real tokenizers scripts/fetch-tokenizers.sh builds (Qwen3,
// Qwen3.5, SmolLM2): ids for every line of the multilingual corpus and of the edge-case file, HF's
// decode of edge cases and random ids, decode(encode(x)) == x, and the streaming detokenizer.
// The expected files are written by scripts/tokenizer/expected_ids.py with HF itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tokenizer/normalizer.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const std::filesystem::path kCache = std::filesystem::path(VT_SOURCE_DIR) / ".cache";

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Split on "\n" only, keeping it: the rule the expected-id script uses.
std::vector<std::string> split_lines(const std::string& data) {
  std::vector<std::string> lines;
  for (size_t start = 0; start < data.size();) {
    size_t end = data.find('\n', start);
    end = end == std::string::npos ? data.size() : end + 1;
    lines.push_back(data.substr(start, end - start));
    start = end;
  }
  return lines;
}

std::vector<std::vector<int32_t>> read_ids(const std::filesystem::path& path) {
  std::vector<std::vector<int32_t>> all;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<int32_t> ids;
    const char* cursor = line.c_str();
    char* end = nullptr;
    for (long value = std::strtol(cursor, &end, 10); end != cursor;
         value = std::strtol(cursor, &end, 10)) {
      ids.push_back(int32_t(value));
      cursor = end;
    }
    all.push_back(std::move(ids));
  }
  return all;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 40; ++i)
    out.append(i ? " " : "").append(std::to_string(ids[i]));
  return out + (ids.size() > 40 ? " ..." : "");
}

class RealTokenizer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    folder_ = kCache / "tokenizers" / GetParam();
    expected_ = kCache / "expected" / GetParam();
    if (!std::filesystem::exists(folder_ / "tokenizer.json") ||
        !std::filesystem::exists(expected_ / "stamp.json"))
      GTEST_SKIP() << folder_
                   << " or its expected ids are missing: run scripts/fetch-tokenizers.sh";
    tokenizer_ = vt::Tokenizer::load(folder_.string());
  }

  // Every line's ids must equal HF's; returns the lines for further checks.
  std::vector<std::string> check_ids(const std::filesystem::path& text_file,
                                     const std::string& name) {
    const std::vector<std::string> lines = split_lines(read_file(text_file));
    const auto expected = read_ids(expected_ / (name + ".ids"));
    EXPECT_EQ(lines.size(), expected.size())
        << name << ": line count differs from the expected file";
    size_t mismatches = 0;
    for (size_t i = 0; i < lines.size() && i < expected.size(); ++i) {
      const std::vector<int32_t> ids = tokenizer_->encode(lines[i]);
      if (ids != expected[i] && ++mismatches <= 5)
        ADD_FAILURE() << GetParam() << " " << name << " line " << i + 1 << ": "
                      << lines[i].substr(0, 200) << "\n  vt: " << show(ids)
                      << "\n  HF: " << show(expected[i]);
    }
    EXPECT_EQ(mismatches, 0u) << GetParam() << ": " << name << " lines whose ids differ from HF";
    return lines;
  }

  std::filesystem::path folder_, expected_;
  std::unique_ptr<vt::Tokenizer> tokenizer_;
};

TEST_P(RealTokenizer, CorpusIdsAndRoundTrip) {
  const std::vector<std::string> lines =
      check_ids(kCache / "corpus" / "multilingual.txt", "corpus");
  ASSERT_GT(lines.size(), 100000u);
  // decode(encode(x)) == x, up to the tokenizer's own normalizer (NFC for Qwen).
  std::unique_ptr<vt::Normalizer> normalizer;
  const auto root = nlohmann::json::parse(read_file(folder_ / "tokenizer.json"));
  if (!root["normalizer"].is_null())
    normalizer = std::make_unique<vt::Normalizer>(
        vt::Normalizer::from_json(root["normalizer"], "normalizer"));
  size_t differing = 0;
  std::string want;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (normalizer)
      normalizer->normalize(lines[i], want);
    else
      want = lines[i];
    const std::string got = tokenizer_->decode(tokenizer_->encode(lines[i]));
    if (got != want && ++differing <= 5)
      ADD_FAILURE() << "round trip of line " << i + 1 << ": " << lines[i] << "\n  gave " << got;
  }
  EXPECT_EQ(differing, 0u);
}

TEST_P(RealTokenizer, EdgeCasesIdsAndDecode) {
  check_ids(std::filesystem::path(VT_SOURCE_DIR) / "tests/tokenizer/data/edge_cases.txt",
            "edge_cases");
  // HF's decode of the edge-case encodings and of random id sequences (cut UTF-8, special tokens).
  std::ifstream in(expected_ / "decode.jsonl");
  std::string line;
  size_t records = 0;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    const auto ids = record["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->decode(ids), record["text"].get<std::string>()) << "ids " << show(ids);
    EXPECT_EQ(tokenizer_->decode(ids, true), record["text_skip_special"].get<std::string>())
        << "ids " << show(ids);
    ++records;
  }
  EXPECT_GT(records, 600u);
}

// Feeds ids one by one: every piece must be whole UTF-8 and the pieces must add up to decode().
void check_stream(const vt::Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                  bool skip_special) {
  vt::StreamingDetokenizer stream(tokenizer, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    ASSERT_TRUE(vt::utf8::is_valid(piece)) << "partial UTF-8 emitted";
    streamed += piece;
  }
  const std::string rest = stream.finish();
  ASSERT_TRUE(vt::utf8::is_valid(rest));
  streamed += rest;
  ASSERT_EQ(streamed, tokenizer.decode(ids, skip_special)) << "ids " << show(ids);
}

TEST_P(RealTokenizer, StreamingDetokenizer) {
  // The corpus as one long generation...
  const std::string corpus = read_file(kCache / "corpus" / "multilingual.txt").substr(0, 400000);
  check_stream(*tokenizer_, tokenizer_->encode(corpus), false);
  // ...and random ids (any id, special ones, and single-byte tokens that cut characters).
  std::mt19937 random(7);
  std::vector<int32_t> byte_tokens;
  for (int32_t id = 0; id < tokenizer_->vocab_size() && byte_tokens.size() < 4000; ++id)
    if (tokenizer_->decode({id}).size() <= 3) byte_tokens.push_back(id);
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids(1 + random() % 40);
    for (int32_t& id : ids)
      id = random() % 2 ? byte_tokens[random() % byte_tokens.size()]
                        : int32_t(random() % uint32_t(tokenizer_->vocab_size()));
    check_stream(*tokenizer_, ids, round % 2 == 1);
  }
}

TEST_P(RealTokenizer, ConfigAndSpecialTokens) {
  const vt::TokenizerConfig& config = tokenizer_->config();
  if (GetParam() == "smollm2") {
    EXPECT_EQ(tokenizer_->vocab_size(), 49152);
    EXPECT_EQ(config.eos_token, "<|im_end|>");
    EXPECT_EQ(tokenizer_->token_to_id("<|im_end|>"), 2);
  } else {
    EXPECT_EQ(tokenizer_->vocab_size(), GetParam() == "qwen3" ? 151669 : 248077);
    EXPECT_EQ(tokenizer_->token_to_id("<|im_start|>"), GetParam() == "qwen3" ? 151644 : 248045);
    EXPECT_TRUE(tokenizer_->is_special(tokenizer_->token_to_id("<|im_end|>")));
    EXPECT_FALSE(tokenizer_->is_special(tokenizer_->token_to_id("<think>")));
  }
  EXPECT_NE(config.chat_template.find("<|im_start|>"), std::string::npos)
      << "chat template missing";
}

INSTANTIATE_TEST_SUITE_P(Fetched, RealTokenizer, ::testing::Values("qwen3", "qwen3_5", "smollm2"),
                         [](const auto& info) { return info.param; });

}  // namespace
