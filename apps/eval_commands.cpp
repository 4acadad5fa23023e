// `vt eval perplexity`: perplexity of a text file under a model. Scripted use depends on this:
//   vt eval perplexity --model FILE.gguf|DIR --file TEXT [--context 512] [--max-tokens N] [--json]
// The text is tokenized with the model's own tokenizer (no BOS added); windows of --context
// tokens are scored independently (src/engine/perplexity.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/commands.h"
#include "apps/model_text.h"
#include "core/error.h"
#include "engine/perplexity.h"

namespace {

struct PerplexityArgs {
  std::string model, file;
  int64_t context = 512, max_tokens = 0;
  bool json = false;
};

void run_perplexity(const PerplexityArgs& args) {
  std::ifstream in(args.file, std::ios::binary);
  VT_CHECK(in, args.file, ": cannot open");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  auto text = vt::apps::load_model_text(args.model);
  vt::EncodeOptions encode;
  encode.add_special_tokens = false;
  std::vector<int32_t> ids = text.tokenizer->encode(buffer.str(), encode);
  if (args.max_tokens > 0 && int64_t(ids.size()) > args.max_tokens) ids.resize(size_t(args.max_tokens));
  auto model = vt::apps::load_model_with_progress(args.model);
  auto result = vt::perplexity(*model, ids, args.context, [&](int64_t done, int64_t total) {
    if (!args.json) std::fprintf(stderr, "\rwindow %lld / %lld", (long long)done, (long long)total), std::fflush(stderr);
  });
  if (args.json) {
    nlohmann::json output = {{"perplexity", result.perplexity},   {"nll_sum", result.nll_sum},
                             {"tokens", ids.size()},              {"predicted_tokens", result.predicted_tokens},
                             {"windows", result.windows},         {"context", args.context},
                             {"seconds", result.seconds}};
    std::cout << output.dump() << std::endl;
    return;
  }
  std::fprintf(stderr, "\n");
  std::printf("perplexity %.4f over %lld predicted tokens (%zu tokens, %lld windows of %lld) in %.1f s\n",
              result.perplexity, (long long)result.predicted_tokens, ids.size(), (long long)result.windows,
              (long long)args.context, result.seconds);
}

}  // namespace

namespace vt::apps {

void add_eval_commands(CLI::App& app) {
  auto* eval = app.add_subcommand("eval", "Evaluate a model");
  eval->require_subcommand(1);
  auto args = std::make_shared<PerplexityArgs>();
  auto* perplexity = eval->add_subcommand("perplexity", "Perplexity of a text file (windows scored independently)");
  perplexity->add_option("--model", args->model, "GGUF file or HF model folder")->required();
  perplexity->add_option("--file", args->file, "text file (UTF-8)")->required();
  perplexity->add_option("--context", args->context, "tokens per window (default 512)")->check(CLI::Range(2, 1 << 20));
  perplexity->add_option("--max-tokens", args->max_tokens, "score only the first N tokens")->check(CLI::NonNegativeNumber);
  perplexity->add_flag("--json", args->json, "print one JSON object");
  perplexity->callback([args] { run_perplexity(*args); });
}

}  // namespace vt::apps
