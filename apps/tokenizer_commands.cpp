// `vt tokenize` and `vt detokenize`: text to token ids and back with a model's tokenizer.
//   vt tokenize --tokenizer DIR (--text S | --file F) [--json]     ids, comma-separated
//   vt detokenize --tokenizer DIR --ids 1,2,3 [--skip-special-tokens] [--json]
// DIR holds tokenizer.json (a model folder, or one from scripts/fetch-tokenizers.sh).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

struct TokenizeArgs {
  std::string tokenizer, text, file;
  bool json = false;
};

struct DetokenizeArgs {
  std::string tokenizer, ids;
  bool json = false, skip_special_tokens = false;
};

void run_tokenize(const TokenizeArgs& args, bool have_text) {
  VT_CHECK(have_text != !args.file.empty(), "tokenize: give exactly one of --text and --file");
  std::string text = args.text;
  if (!args.file.empty()) {
    std::ifstream in(args.file, std::ios::binary);
    VT_CHECK(in, args.file, ": cannot open");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  }
  auto tokenizer = vt::Tokenizer::load(args.tokenizer);
  const std::vector<int32_t> ids = tokenizer->encode(text);
  if (args.json) {
    std::cout << nlohmann::json({{"ids", ids}, {"count", ids.size()}}).dump() << std::endl;
    return;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line.append(i ? "," : "").append(std::to_string(ids[i]));
  std::cout << line << std::endl;
}

void run_detokenize(const DetokenizeArgs& args) {
  auto tokenizer = vt::Tokenizer::load(args.tokenizer);
  std::vector<int32_t> ids;
  std::stringstream stream(args.ids);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      VT_FAIL("--ids: '", item, "' is not an integer");
    }
    VT_CHECK(used == item.size() && value >= 0 && value < tokenizer->vocab_size(), "--ids: '", item,
             "' is not a token id of this tokenizer (vocabulary size ", tokenizer->vocab_size(),
             ")");
    tokenizer->id_to_token(int32_t(value));  // throws for an id the vocabulary skips
    ids.push_back(int32_t(value));
  }
  const std::string text = tokenizer->decode(ids, args.skip_special_tokens);
  if (args.json)
    std::cout << nlohmann::json({{"text", text}}).dump() << std::endl;
  else
    std::cout << text << std::flush;  // the text exactly, no newline added
}

}  // namespace

namespace vt::apps {

void add_tokenizer_commands(CLI::App& app) {
  auto tokenize_args = std::make_shared<TokenizeArgs>();
  auto* tokenize =
      app.add_subcommand("tokenize", "Encode text into token ids (as HF tokenizers does)");
  tokenize
      ->add_option("--tokenizer", tokenize_args->tokenizer,
                   "folder with tokenizer.json, or the file")
      ->required();
  auto* text_option = tokenize->add_option("--text", tokenize_args->text, "text to encode");
  auto* file_option =
      tokenize->add_option("--file", tokenize_args->file, "file whose bytes to encode");
  text_option->excludes(file_option);
  tokenize->add_flag("--json", tokenize_args->json, "print {\"ids\": [...], \"count\": N}");
  tokenize->callback(
      [tokenize_args, text_option] { run_tokenize(*tokenize_args, text_option->count() > 0); });

  auto detokenize_args = std::make_shared<DetokenizeArgs>();
  auto* detokenize = app.add_subcommand("detokenize", "Decode token ids into text");
  detokenize
      ->add_option("--tokenizer", detokenize_args->tokenizer,
                   "folder with tokenizer.json, or the file")
      ->required();
  detokenize->add_option("--ids", detokenize_args->ids, "comma-separated token ids")->required();
  detokenize->add_flag("--skip-special-tokens", detokenize_args->skip_special_tokens,
                       "leave special tokens out");
  detokenize->add_flag("--json", detokenize_args->json, "print {\"text\": ...}");
  detokenize->callback([detokenize_args] { run_detokenize(*detokenize_args); });
}

}  // namespace vt::apps
