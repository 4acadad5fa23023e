// `vt eval perplexity`: perplexity of a text file under a model. Scripted use depends on this:
//   vt eval perplexity --model FILE.gguf|DIR --file TEXT [--context 512] [--max-tokens N]
//                      [--fp8-activations quantized|float] [--json]
// The text is tokenized with the model's own tokenizer (no BOS added); windows of --context
// tokens are scored independently (src/engine/perplexity.h).
// `vt eval drift`: what the FP8 output layer changes. The same prompts run greedily with the
// output layer as stored and quantised to FP8 128x128 blocks (W8A8, its 32 largest-norm input
// columns kept out of FP8 unless --fp8-exact-columns says otherwise, as `--lm-head fp8` on the
// GPU; --fp8-activations float: weight-only, the CPU reference only); per prompt: identical, or
// the first position where they part; and perplexity of a fixed text under both.
//   vt eval drift --model M --prompts FILE [--max-new-tokens 32] [--text FILE]
//                 [--fp8-activations quantized|float] [--fp8-block-rows N] [--fp8-block-cols N]
//                 [--fp8-exact-columns N] [--json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/lm_head_options.h"
#include "apps/model_text.h"
#include "core/error.h"
#include "model/generate.h"
#include "model/perplexity.h"

namespace {

struct PerplexityArgs {
  std::string model, file, fp8_activations = "quantized";
  int64_t context = 512, max_tokens = 0;
  bool json = false;
  vt::apps::LmHeadArgs lm_head;
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
  const auto lm_head = vt::apps::lm_head_quantization(args.lm_head);
  vt::LoadOptions load_options;
  load_options.fp8_activations =
      args.fp8_activations == "float" ? vt::Fp8Activations::kFloat : vt::Fp8Activations::kQuantized;
  auto model = vt::apps::load_model_with_progress(args.model, load_options);
  if (lm_head) model->quantize_lm_head_fp8(*lm_head);
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

struct DriftArgs {
  std::string model, prompts, text, fp8_activations = "quantized";
  int64_t max_new_tokens = 32, context = 512, max_text_tokens = 4096, fp8_block_rows = 128, fp8_block_cols = 128,
          fp8_exact_columns = vt::kDefaultLmHeadExactColumns;
  bool json = false, raw = false;
};

std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  VT_CHECK(in, path, ": cannot open");
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) prompts.push_back(line);
  VT_CHECK(!prompts.empty(), path, ": no prompts (one per line)");
  return prompts;
}

void run_drift(const DriftArgs& args) {
  auto text = vt::apps::load_model_text(args.model);
  const auto prompts = read_prompts(args.prompts);
  std::vector<std::vector<int32_t>> prompt_ids;
  // Each prompt as one user turn through the model's chat template (instruct models), unless
  // --raw or the model has none.
  const bool chat = !args.raw && !text.chat_templates.templates.empty();
  for (const auto& prompt : prompts) {
    if (!chat) {
      prompt_ids.push_back(text.tokenizer->encode(prompt, vt::EncodeOptions{}));
      continue;
    }
    vt::jinja::ChatRequest request;
    request.messages.push_back({{"role", "user"}, {"content", prompt}});
    request.add_generation_prompt = true;
    const vt::jinja::Template chat_template(vt::jinja::select_chat_template(text.chat_templates, "", false));
    vt::EncodeOptions encode;
    encode.add_special_tokens = false;  // the template has them
    prompt_ids.push_back(text.tokenizer->encode(
        vt::jinja::apply_chat_template(chat_template, text.chat_templates.special_tokens, request), encode));
  }
  std::vector<int32_t> text_ids;
  if (!args.text.empty()) {
    std::ifstream in(args.text, std::ios::binary);
    VT_CHECK(in, args.text, ": cannot open");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    vt::EncodeOptions encode;
    encode.add_special_tokens = false;
    text_ids = text.tokenizer->encode(buffer.str(), encode);
    if (int64_t(text_ids.size()) > args.max_text_tokens) text_ids.resize(size_t(args.max_text_tokens));
  }
  auto model = vt::apps::load_model_with_progress(args.model);
  struct Run {
    std::vector<std::vector<int32_t>> outputs;
    double perplexity = 0;
  };
  const auto run = [&](const char* label) {
    Run result;
    vt::GenerateOptions options;
    options.max_new_tokens = args.max_new_tokens;
    options.stop_token_ids = text.stop_ids;
    for (size_t i = 0; i < prompt_ids.size(); ++i) {
      result.outputs.push_back(vt::generate(*model, prompt_ids[i], options).output_ids);
      if (!args.json) std::fprintf(stderr, "\r%s: prompt %zu / %zu", label, i + 1, prompt_ids.size());
    }
    if (!text_ids.empty()) result.perplexity = vt::perplexity(*model, text_ids, args.context).perplexity;
    if (!args.json) std::fprintf(stderr, "\n");
    return result;
  };
  const Run stored = run("output layer as stored");
  const bool weight_only = args.fp8_activations == "float";
  model->quantize_lm_head_fp8({weight_only ? vt::Fp8Activations::kFloat : vt::Fp8Activations::kQuantized,
                               args.fp8_block_rows, args.fp8_block_cols, args.fp8_exact_columns});
  const bool other_blocks = args.fp8_block_rows != 128 || args.fp8_block_cols != 128;
  const std::string variant =
      std::string(weight_only ? ", weight-only" : "") +
      (other_blocks ? ", " + std::to_string(args.fp8_block_rows) + "x" + std::to_string(args.fp8_block_cols) + " blocks"
                    : "") +
      (args.fp8_exact_columns > 0 ? ", " + std::to_string(args.fp8_exact_columns) + " columns exact" : "");
  const Run fp8 = run(("FP8 output layer" + variant).c_str());

  nlohmann::json rows = nlohmann::json::array();
  int64_t identical = 0, compared_total = 0, matched_total = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& a = stored.outputs[i];
    const auto& b = fp8.outputs[i];
    size_t same = 0;
    while (same < a.size() && same < b.size() && a[same] == b[same]) ++same;
    const bool equal = a == b;
    identical += equal;
    compared_total += int64_t(std::max(a.size(), b.size()));
    matched_total += int64_t(same);
    nlohmann::json row = {{"prompt", i}, {"prompt_tokens", prompt_ids[i].size()}, {"tokens_stored", a.size()},
                          {"tokens_fp8", b.size()}, {"identical", equal}};
    row["first_divergence"] = equal ? nlohmann::json(nullptr) : nlohmann::json(same);
    if (!equal && same < a.size() && same < b.size()) {
      row["token_stored"] = text.tokenizer->decode({a[same]});
      row["token_fp8"] = text.tokenizer->decode({b[same]});
    }
    rows.push_back(row);
  }
  nlohmann::json report = {{"model", args.model},
                           {"prompts", prompts.size()},
                           {"chat_template", chat},
                           {"max_new_tokens", args.max_new_tokens},
                           {"identical", identical},
                           {"matched_prefix_tokens", matched_total},
                           {"compared_tokens", compared_total},
                           {"fp8_activations", args.fp8_activations},
                           {"fp8_block_rows", args.fp8_block_rows},
                           {"fp8_block_cols", args.fp8_block_cols},
                           {"fp8_exact_columns", args.fp8_exact_columns},
                           {"rows", rows}};
  if (!text_ids.empty()) {
    report["text_tokens"] = text_ids.size();
    report["perplexity_stored"] = stored.perplexity;
    report["perplexity_fp8"] = fp8.perplexity;
    report["perplexity_relative_change"] = fp8.perplexity / stored.perplexity - 1.0;
  }
  if (args.json) {
    std::cout << report.dump(1) << std::endl;
    return;
  }
  std::printf("| prompt | tokens (stored / fp8) | result |\n|---|---|---|\n");
  for (const auto& row : rows) {
    std::string result = row["identical"].get<bool>() ? "identical" : "parts at token " + row["first_divergence"].dump();
    if (row.contains("token_stored"))
      result += " (" + row["token_stored"].dump() + " vs " + row["token_fp8"].dump() + ")";
    std::printf("| %lld | %lld / %lld | %s |\n", (long long)row["prompt"].get<int64_t>(),
                (long long)row["tokens_stored"].get<int64_t>(), (long long)row["tokens_fp8"].get<int64_t>(),
                result.c_str());
  }
  std::printf("\n%lld of %zu prompts identical; %lld of %lld generated tokens before the first difference\n",
              (long long)identical, prompts.size(), (long long)matched_total, (long long)compared_total);
  if (!text_ids.empty())
    std::printf("perplexity over %zu tokens: %.4f as stored, %.4f with the FP8 output layer%s (%+.3f%%)\n",
                text_ids.size(), stored.perplexity, fp8.perplexity, variant.c_str(),
                100.0 * (fp8.perplexity / stored.perplexity - 1.0));
}

}  // namespace

namespace vt::apps {

void add_eval_commands(CLI::App& app) {
  auto* eval = app.add_subcommand("eval", "Evaluate a model");
  eval->require_subcommand(1);
  auto args = std::make_shared<PerplexityArgs>();
  auto* perplexity = eval->add_subcommand("perplexity", "Perplexity of a text file (windows scored independently)");
  perplexity->add_option("--model", args->model, "GGUF file or HF model folder")->required();
  vt::apps::add_lm_head_options(perplexity, args->lm_head);
  perplexity->add_option("--file", args->file, "text file (UTF-8)")->required();
  perplexity->add_option("--context", args->context, "tokens per window (default 512)")->check(CLI::Range(2, 1 << 20));
  perplexity->add_option("--max-tokens", args->max_tokens, "score only the first N tokens")->check(CLI::NonNegativeNumber);
  perplexity->add_option("--fp8-activations", args->fp8_activations,
                         "an FP8 checkpoint's linears: quantized (W8A8, default) or float (weight-only)")
      ->check(CLI::IsMember({"quantized", "float"}));
  perplexity->add_flag("--json", args->json, "print one JSON object");
  perplexity->callback([args] { run_perplexity(*args); });
  add_eval_layers_command(*eval);

  auto drift_args = std::make_shared<DriftArgs>();
  auto* drift = eval->add_subcommand("drift", "Greedy outputs and perplexity with the output layer as stored vs FP8");
  drift->add_option("--model", drift_args->model, "GGUF file or HF model folder")->required();
  drift->add_option("--prompts", drift_args->prompts, "text file, one prompt per line")->required();
  drift->add_option("--max-new-tokens", drift_args->max_new_tokens, "greedy tokens per prompt (default 32)")
      ->check(CLI::Range(1, 4096));
  drift->add_option("--text", drift_args->text, "text file whose perplexity is compared");
  drift->add_option("--context", drift_args->context, "perplexity window (default 512)")->check(CLI::Range(2, 1 << 20));
  drift->add_option("--max-text-tokens", drift_args->max_text_tokens, "score at most N tokens of --text (default 4096)")
      ->check(CLI::PositiveNumber);
  drift->add_flag("--raw", drift_args->raw, "encode prompts as plain text, not through the chat template");
  drift->add_option("--fp8-activations", drift_args->fp8_activations,
                    "quantized: W8A8 as the GPU runs it (default); float: weight-only (CPU reference), to tell the "
                    "weights' rounding from the activations'")
      ->check(CLI::IsMember({"quantized", "float"}));
  drift->add_option("--fp8-block-rows", drift_args->fp8_block_rows,
                    "rows per weight scale block (default 128, the GPU's format; others: the CPU reference only, "
                    "1 a scale per row)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  drift->add_option("--fp8-block-cols", drift_args->fp8_block_cols,
                    "columns per weight scale block (default 128, the GPU's format; others: the CPU reference only; "
                    "the input width or more: one scale per block_rows rows)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  drift->add_option("--fp8-exact-columns", drift_args->fp8_exact_columns,
                    "keep the N input columns of largest norm out of FP8: zero in the FP8 matrix (the scales from "
                    "the rest), multiplied as stored with the unquantised input (default 32, as --lm-head fp8; 0: "
                    "none)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  drift->add_flag("--json", drift_args->json, "print one JSON object");
  drift->callback([drift_args] { run_drift(*drift_args); });
}

}  // namespace vt::apps
