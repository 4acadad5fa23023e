// Tokenizer pieces on small files: a Llama-2 style tokenizer (char-level BPE, byte fallback, unk,
// Prepend/Replace normalizer, TemplateProcessing, Replace/ByteFallback/Fuse/Strip decoder) whose
// expected ids and texts were produced by HF tokenizers 0.23.3 on
// tests/tokenizer/data/llama_style.json, plus BPE merge order, added-token matching, UTF-8 handling
// and the streaming detokenizer.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const std::string kData = std::string(VT_SOURCE_DIR) + "/tests/tokenizer/data/";

using Ids = std::vector<int32_t>;

TEST(LlamaStyleTokenizer, EncodeMatchesHf) {
  auto tokenizer = vt::Tokenizer::load(kData + "llama_style.json");
  EXPECT_EQ(tokenizer->encode("hello world"), (Ids{1, 272, 277}));
  EXPECT_EQ(tokenizer->encode(" hello  world"), (Ids{1, 259, 272, 259, 277}));
  // é is in the vocabulary, ö is not: byte fallback.
  EXPECT_EQ(tokenizer->encode("héllo wörld"),
            (Ids{1, 268, 267, 269, 263, 273, 198, 185, 265, 278}));
  EXPECT_EQ(tokenizer->encode("日本"), (Ids{1, 259, 233, 154, 168, 233, 159, 175}));
  // The normalizer runs per segment between added tokens: "world" gets its own "▁".
  EXPECT_EQ(tokenizer->encode("hello</s>world"), (Ids{1, 272, 2, 277}));
  EXPECT_EQ(tokenizer->encode(""), (Ids{1}));
  EXPECT_EQ(tokenizer->encode("x"), (Ids{1, 259, 123}));
  vt::EncodeOptions no_template;
  no_template.add_special_tokens = false;
  EXPECT_EQ(tokenizer->encode("hello", no_template), (Ids{272}));
  vt::EncodeOptions split_special;
  split_special.split_special_tokens = true;
  EXPECT_NE(tokenizer->encode("</s>", split_special), (Ids{1, 2}));
}

TEST(LlamaStyleTokenizer, DecodeMatchesHf) {
  auto tokenizer = vt::Tokenizer::load(kData + "llama_style.json");
  EXPECT_FALSE(tokenizer->bytes_per_token());
  EXPECT_EQ(tokenizer->decode({1, 272, 277}), "<s> hello world");
  EXPECT_EQ(tokenizer->decode({1, 272, 277}, true), "hello world");
  EXPECT_EQ(tokenizer->decode({1, 259, 272, 259, 277}, true), " hello  world");
  EXPECT_EQ(tokenizer->decode({233, 154, 168}), "日");
  EXPECT_EQ(tokenizer->decode({233, 154}),
            "\xEF\xBF\xBD\xEF\xBF\xBD");  // one U+FFFD per byte token
  EXPECT_EQ(tokenizer->decode({233, 262, 168}), "\xEF\xBF\xBDl\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer->decode({259, 259, 260}), " h");
  EXPECT_EQ(tokenizer->decode({0, 0, 268}), "<unk><unk> h");
  EXPECT_EQ(tokenizer->decode({0, 0, 268}, true), "h");
  EXPECT_EQ(tokenizer->decode({35, 260}), "h");  // <0x20> then Strip of the first space
  EXPECT_EQ(tokenizer->decode({2, 259, 260}), "</s> h");
  EXPECT_EQ(tokenizer->decode({2, 259, 260}, true), "h");
  EXPECT_EQ(tokenizer->decode({-1, 5000, 260}), "h");  // unknown ids are dropped, as in HF
  EXPECT_THROW(tokenizer->id_to_token(5000), vt::Error);
}

void check_stream(const vt::Tokenizer& tokenizer, const Ids& ids, bool skip_special) {
  vt::StreamingDetokenizer stream(tokenizer, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    ASSERT_TRUE(vt::utf8::is_valid(piece));
    streamed += piece;
  }
  streamed += stream.finish();
  ASSERT_EQ(streamed, tokenizer.decode(ids, skip_special));
}

TEST(StreamingDetokenizer, WindowedDecoderChain) {
  auto tokenizer = vt::Tokenizer::load(kData + "llama_style.json");
  // Byte runs that complete late, cut characters, specials, leading-space tokens.
  check_stream(*tokenizer, {1, 272, 233, 154, 168, 277, 233, 154}, false);
  check_stream(*tokenizer, {35, 260, 259, 233, 262}, true);
  std::mt19937 random(11);
  for (int round = 0; round < 3000; ++round) {
    Ids ids(1 + random() % 16);
    for (int32_t& id : ids)
      id = random() % 3 == 0 ? int32_t(3 + 0xC0 + random() % 64)
                             : int32_t(random() % uint32_t(tokenizer->vocab_size()));
    check_stream(*tokenizer, ids, round % 2 == 0);
  }
}

TEST(StreamingDetokenizer, ByteLevelCutCharacters) {
  auto tokenizer = vt::Tokenizer::load(kData + "tiny_byte_level.json");
  ASSERT_TRUE(tokenizer->bytes_per_token());
  const Ids ids = tokenizer->encode("emoji 👨‍👩‍👧 漢字 é\xE2\x82");
  check_stream(*tokenizer, ids, false);
  std::mt19937 random(5);
  for (int round = 0; round < 2000; ++round) {
    Ids sequence(1 + random() % 20);
    for (int32_t& id : sequence) id = int32_t(random() % uint32_t(tokenizer->vocab_size()));
    check_stream(*tokenizer, sequence, round % 2 == 0);
  }
}

TEST(ByteLevelTokenizer, RoundTripAndSpecialTokens) {
  auto tokenizer = vt::Tokenizer::load(kData + "tiny_byte_level.json");
  const std::string text = "Hello <|im_start|>user\nwie geht's? 漢字 👍🏽\t\t  x<think>";
  const Ids ids = tokenizer->encode(text);
  EXPECT_EQ(tokenizer->decode(ids), text);
  const int32_t im_start = tokenizer->token_to_id("<|im_start|>");
  ASSERT_GE(im_start, 0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_start), 1);
  EXPECT_TRUE(tokenizer->is_special(im_start));
  EXPECT_FALSE(tokenizer->is_special(tokenizer->token_to_id("<think>")));
  EXPECT_EQ(tokenizer->decode(ids, true), "Hello user\nwie geht's? 漢字 👍🏽\t\t  x<think>");
  // Raw invalid bytes are replaced by U+FFFD before encoding.
  EXPECT_EQ(tokenizer->decode(tokenizer->encode("a\xFF\xE2\x82z")), "a\xEF\xBF\xBD\xEF\xBF\xBDz");
}

TEST(Utf8, ReplacementFollowsMaximalSubparts) {
  // Python: b"...".decode("utf-8", errors="replace")
  EXPECT_EQ(vt::utf8::replace_invalid("a\xE2\x82z"), "a\xEF\xBF\xBDz");  // cut sequence: one
  EXPECT_EQ(vt::utf8::replace_invalid("\xC0\xAF"),
            "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: per byte
  EXPECT_EQ(vt::utf8::replace_invalid("\xED\xA0\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(vt::utf8::replace_invalid("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(
      vt::utf8::replace_invalid("\xF4\x90\x80\x80"),
      std::string(4 * 3, ' ').replace(0, 12, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));
  EXPECT_TRUE(vt::utf8::is_valid("漢字 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(vt::utf8::is_valid("\xF0\x9F\x98"));
}

TEST(Utf8, IncrementalDecoderEqualsWholeReplacement) {
  std::mt19937 random(3);
  const std::string alphabet =
      "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x80\xBF\xC0\xED\xA0\xF4\x90\xFF";
  for (int round = 0; round < 5000; ++round) {
    std::string bytes(random() % 24, ' ');
    for (char& c : bytes) c = alphabet[random() % alphabet.size()];
    vt::utf8::IncrementalDecoder decoder;
    std::string out;
    for (size_t position = 0; position < bytes.size();) {
      const size_t chunk = 1 + random() % 4;
      std::string piece;
      decoder.push(std::string_view(bytes).substr(position, chunk), piece);
      ASSERT_TRUE(vt::utf8::is_valid(piece));
      out += piece;
      position += chunk;
    }
    decoder.finish(out);
    ASSERT_EQ(out, vt::utf8::replace_invalid(bytes));
  }
}

TEST(Regex, WhiteSpaceIsOniguruma) {
  EXPECT_EQ(vt::onig_compatible_pattern(R"(\s+(?!\S)|[^\s\p{L}])"),
            "[\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{"
            "2029}\\x{202F}\\x{205F}"
            "\\x{3000}]+(?![^\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"
            "\\x{2028}\\x{2029}"
            "\\x{202F}\\x{205F}\\x{3000}])|[^\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{"
            "2000}-\\x{200A}\\x{2028}"
            "\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\p{L}]");
  // U+180E is not White_Space (PCRE2 10.42 alone would say it is); U+0085 is.
  vt::Regex regex(R"(\s+)");
  std::vector<vt::Span> matches;
  regex.find_all(
      "a\xE1\xA0\x8E"
      "b\xC2\x85",
      matches);
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].begin, 5u);
}

// Merge order on a hand-made byte-level BPE: ranks decide, the leftmost pair wins ties, and a
// word longer than the small-word path gives the same split as a short one.
TEST(Bpe, MergeOrderAndLongWords) {
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    // GPT-2 byte alphabet for the printable ASCII bytes is the byte itself.
    if (b >= '!' && b <= '~' && b != '"' && b != '\\')
      vocab.append(1, '"').append(1, char(b)).append("\": ").append(std::to_string(b)).append(", ");
  }
  vocab += "\"aa\": 300, \"aaa\": 301, \"ab\": 302, \"aab\": 303}";
  const std::string json = R"({"version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": )" +
                           vocab +
                           R"(, "merges": [["a", "b"], ["a", "a"], ["aa", "a"], ["a", "ab"]]}})";
  auto tokenizer = vt::Tokenizer::from_json_text(json, "test.json");
  EXPECT_EQ(tokenizer->encode("aab"), (Ids{303}));  // a+b (rank 0) first, then a+ab
  EXPECT_EQ(tokenizer->encode("aaaa"), (Ids{300, 300}));
  EXPECT_EQ(tokenizer->encode("aaaaa"), (Ids{300, 301}));  // [aa a a a] -> [aa aa a] -> [aa aaa]
  // Long words take the heap path; a plain "merge the leftmost lowest rank" loop must agree.
  const std::map<std::pair<int32_t, int32_t>, std::pair<int, int32_t>> merges = {
      {{'a', 'b'}, {0, 302}},
      {{'a', 'a'}, {1, 300}},
      {{300, 'a'}, {2, 301}},
      {{'a', 302}, {3, 303}}};
  std::mt19937 random(9);
  for (int round = 0; round < 50; ++round) {
    std::string word(100 + random() % 900, 'a');
    for (char& c : word) c = random() % 4 ? 'a' : 'b';
    Ids reference(word.begin(), word.end());
    while (true) {
      size_t best = reference.size();
      int best_rank = INT32_MAX;
      for (size_t i = 0; i + 1 < reference.size(); ++i) {
        auto found = merges.find({reference[i], reference[i + 1]});
        if (found != merges.end() && found->second.first < best_rank)
          best = i, best_rank = found->second.first;
      }
      if (best == reference.size()) break;
      reference[best] = merges.at({reference[best], reference[best + 1]}).second;
      reference.erase(reference.begin() + std::ptrdiff_t(best) + 1);
    }
    ASSERT_EQ(tokenizer->encode(word), reference) << word;
  }
}

TEST(AddedTokens, LongestMatchAndFlags) {
  const std::string json =
      R"({"version": "1.0", "normalizer": null, "pre_tokenizer": null, "decoder": null,
    "added_tokens": [
      {"id": 10, "content": "<a>", "special": true, "normalized": false},
      {"id": 11, "content": "<a><b>", "special": false, "normalized": false},
      {"id": 12, "content": "x", "single_word": true, "normalized": false},
      {"id": 13, "content": "[L]", "lstrip": true, "rstrip": true, "normalized": false}],
    "model": {"type": "BPE", "unk_token": "?", "vocab": {"?": 0, "<": 1, "a": 2, ">": 3, "b": 4, " ": 5, "x": 6, "y": 7},
              "merges": []}})";
  auto tokenizer = vt::Tokenizer::from_json_text(json, "test.json");
  EXPECT_EQ(tokenizer->encode("<a><b><a>"), (Ids{11, 10}));
  EXPECT_EQ(tokenizer->encode("yx x xy"),
            (Ids{7, 6, 5, 12, 5, 6, 7}));                      // single_word: only the lone x
  EXPECT_EQ(tokenizer->encode("a  [L]  b"), (Ids{2, 13, 4}));  // lstrip/rstrip eat the spaces
  EXPECT_EQ(tokenizer->encode("é"), (Ids{0}));                 // unk
  EXPECT_EQ(tokenizer->decode({11, 2, 10}), "<a><b> a <a>");   // no decoder: joined by spaces
  EXPECT_EQ(tokenizer->decode({11, 2, 10}, true), "<a><b> a");
}

}  // namespace

// Pre-tokenizer splits against HF's pre_tokenize_str (tests/tokenizer/data/pre_tokenizer_cases.json,
// written with tokenizers 0.23.3): every Split behaviour, invert, string patterns, Digits, ByteLevel.
TEST(PreTokenizer, MatchesHfSplits) {
  std::ifstream in(kData + "pre_tokenizer_cases.json");
  const auto cases = nlohmann::json::parse(in);
  ASSERT_GT(cases.size(), 30u);
  for (const auto& test_case : cases) {
    const auto pre_tokenizer = vt::PreTokenizer::from_json(test_case["json"], "case");
    std::string buffer = test_case["text"].get<std::string>();
    std::vector<vt::Span> spans;
    pre_tokenizer.split(buffer, spans);
    std::vector<std::string> got, want;
    for (const vt::Span& span : spans) got.push_back(buffer.substr(span.begin, span.end - span.begin));
    for (const auto& piece : test_case["pieces"]) {
      // HF shows byte-level pieces in the byte alphabet; vt keeps raw bytes.
      std::string bytes = piece.get<std::string>();
      if (pre_tokenizer.byte_level()) ASSERT_TRUE(vt::byte_level::to_bytes(piece.get<std::string>(), bytes));
      want.push_back(bytes);
    }
    EXPECT_EQ(got, want) << test_case["name"] << " on '" << test_case["text"].get<std::string>() << "'";
  }
}
