// `vt chat`: a conversation with a model through its chat template, answers streamed as they are
// generated. Scripted use depends on this contract:
//   vt chat --model FILE.gguf|DIR [--prompt TEXT] [--system TEXT] [--max-new-tokens N]
//           [--temperature T] [--top-k K] [--top-p P] [--seed S]
// With --prompt: one turn, the answer on stdout. Without: turns read line by line from stdin
// until EOF or "exit". Load progress and timing go to stderr.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "apps/lm_head_options.h"
#include "apps/model_text.h"
#include "core/error.h"
#include "jinja/template.h"
#include "model/generate.h"
#include "tokenizer/streaming_detokenizer.h"

namespace {

struct ChatArgs {
  std::string model, prompt, system;
  int64_t max_new_tokens = 256;
  vt::SamplingParams sampling;
  vt::apps::LmHeadArgs lm_head;
};

class Conversation {
 public:
  Conversation(const ChatArgs& args, vt::Model& model, vt::apps::ModelText& text)
      : args_(args), model_(model), text_(text),
        template_(vt::jinja::select_chat_template(text.chat_templates, "", false)) {
    if (!args.system.empty()) request_.messages.push_back({{"role", "system"}, {"content", args.system}});
    request_.add_generation_prompt = true;
  }

  // Renders the whole conversation plus `user`, generates the answer, streams it to stdout.
  void turn(const std::string& user) {
    request_.messages.push_back({{"role", "user"}, {"content", user}});
    const std::string rendered =
        vt::jinja::apply_chat_template(template_, text_.chat_templates.special_tokens, request_);
    vt::EncodeOptions encode;
    encode.add_special_tokens = false;  // as apply_chat_template(tokenize=True): the template has them
    const std::vector<int32_t> prompt = text_.tokenizer->encode(rendered, encode);
    VT_CHECK(int64_t(prompt.size()) + args_.max_new_tokens <= model_.info().max_positions,
             "chat: the conversation (", prompt.size(), " tokens) no longer fits the model's ",
             model_.info().max_positions, " positions");

    vt::GenerateOptions options;
    options.max_new_tokens = args_.max_new_tokens;
    options.sampling = args_.sampling;
    options.stop_token_ids = text_.stop_ids;
    vt::StreamingDetokenizer detokenizer(*text_.tokenizer, /*skip_special_tokens=*/true);
    std::string answer;
    auto result = vt::generate(model_, prompt, options, [&](int32_t id) {
      for (int32_t stop : text_.stop_ids)
        if (id == stop) return;
      const std::string piece = detokenizer.push(id);
      answer += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    });
    const std::string rest = detokenizer.finish();
    answer += rest;
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const size_t generated = result.output_ids.size();
    const double rate = generated > 1 && result.decode_seconds > 0 ? double(generated - 1) / result.decode_seconds : 0;
    std::fprintf(stderr, "[%zu prompt tokens, prefill %.2f s, %zu tokens at %.1f tok/s]\n", prompt.size(),
                 result.prefill_seconds, generated, rate);
    request_.messages.push_back({{"role", "assistant"}, {"content", answer}});
  }

 private:
  const ChatArgs& args_;
  vt::Model& model_;
  vt::apps::ModelText& text_;
  vt::jinja::Template template_;
  vt::jinja::ChatRequest request_;
};

void run_chat(const ChatArgs& args) {
  auto text = vt::apps::load_model_text(args.model);
  VT_CHECK(!text.chat_templates.templates.empty(), args.model, ": the model has no chat template");
  const auto lm_head = vt::apps::lm_head_quantization(args.lm_head);
  auto model = vt::apps::load_model_with_progress(args.model);
  if (lm_head) model->quantize_lm_head_fp8(*lm_head);
  Conversation conversation(args, *model, text);
  if (!args.prompt.empty()) {
    conversation.turn(args.prompt);
    return;
  }
  const bool terminal = ::isatty(STDIN_FILENO) != 0;
  if (terminal) std::fprintf(stderr, "chat with %s; empty line or Ctrl-D to end\n", args.model.c_str());
  std::string line;
  while (true) {
    if (terminal) std::fprintf(stderr, "> "), std::fflush(stderr);
    if (!std::getline(std::cin, line) || line == "exit" || (terminal && line.empty())) break;
    if (line.empty()) continue;
    conversation.turn(line);
  }
}

}  // namespace

namespace vt::apps {

void add_chat_commands(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  auto* chat = app.add_subcommand("chat", "Chat with a model through its chat template (answers streamed)");
  chat->add_option("--model", args->model, "GGUF file or HF model folder")->required();
  vt::apps::add_lm_head_options(chat, args->lm_head);
  chat->add_option("--prompt", args->prompt, "one user turn; without it, turns are read from stdin");
  chat->add_option("--system", args->system, "a system message to start the conversation with");
  chat->add_option("--max-new-tokens", args->max_new_tokens, "most tokens per answer")->check(CLI::PositiveNumber);
  chat->add_option("--temperature", args->sampling.temperature, "0 = greedy (the default)");
  chat->add_option("--top-k", args->sampling.top_k, "0 = off");
  chat->add_option("--top-p", args->sampling.top_p, "nucleus mass");
  chat->add_option("--seed", args->sampling.seed, "sampling seed");
  chat->callback([args] { run_chat(*args); });
}

}  // namespace vt::apps
