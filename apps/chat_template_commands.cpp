// `vt chat-template`: renders a tokenizer's chat template for a conversation, as HF's
// apply_chat_template(tokenize=False) does. Scripted use depends on this contract:
//   vt chat-template --tokenizer DIR --messages FILE.json [--add-generation-prompt]
//                    [--enable-thinking true|false] [--tools FILE.json] [--template-name NAME]
//                    [--template FILE.jinja] [--kwargs JSON]
// The rendered text goes to stdout byte-exact (no trailing newline added).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/commands.h"
#include "core/error.h"
#include "jinja/chat_template.h"

namespace {

struct ChatTemplateArgs {
  std::string tokenizer, messages, tools, enable_thinking, template_name, template_file, kwargs;
  bool add_generation_prompt = false;
};

nlohmann::ordered_json read_json(const std::string& path, const char* option) {
  std::ifstream in(path, std::ios::binary);
  VT_CHECK(in, option, " ", path, ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::ordered_json::parse(text.str());
  } catch (const nlohmann::json::exception& error) {
    VT_FAIL(option, " ", path, ": invalid JSON: ", error.what());
  }
}

void run_chat_template(const ChatTemplateArgs& args) {
  vt::jinja::ChatTemplateSet set;
  if (!args.tokenizer.empty()) set = vt::jinja::load_chat_templates(args.tokenizer);
  vt::jinja::ChatRequest request;
  request.messages = read_json(args.messages, "--messages");
  // A bare list of messages, or an object with "messages" (and optionally "tools"), is accepted.
  if (request.messages.is_object() && request.messages.contains("messages")) {
    nlohmann::ordered_json conversation = request.messages;
    request.messages = conversation["messages"];
    if (conversation.contains("tools")) request.tools = conversation["tools"];
  }
  VT_CHECK(request.messages.is_array(), "--messages ", args.messages, ": expected a JSON list of messages");
  if (!args.tools.empty()) {
    request.tools = read_json(args.tools, "--tools");
    VT_CHECK(request.tools.is_array(), "--tools ", args.tools, ": expected a JSON list of tool definitions");
  }
  request.add_generation_prompt = args.add_generation_prompt;
  if (!args.kwargs.empty()) {
    request.extra = nlohmann::ordered_json::parse(args.kwargs, nullptr, /*allow_exceptions=*/false);
    VT_CHECK(request.extra.is_object(), "--kwargs: expected a JSON object of template variables");
  }
  if (!args.enable_thinking.empty()) request.extra["enable_thinking"] = args.enable_thinking == "true";

  std::string source;
  if (!args.template_file.empty()) {
    std::ifstream in(args.template_file, std::ios::binary);
    VT_CHECK(in, "--template ", args.template_file, ": cannot open");
    std::ostringstream text;
    text << in.rdbuf();
    source = text.str();
  } else {
    source = vt::jinja::select_chat_template(set, args.template_name, !request.tools.is_null());
  }
  const vt::jinja::Template chat_template(source);
  const std::string text = vt::jinja::apply_chat_template(chat_template, set.special_tokens, request);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

namespace vt::apps {

void add_chat_template_commands(CLI::App& app) {
  auto args = std::make_shared<ChatTemplateArgs>();
  CLI::App* command = app.add_subcommand("chat-template", "Render a tokenizer's chat template for a conversation");
  command->add_option("--tokenizer", args->tokenizer,
                      "Folder with tokenizer_config.json and/or chat_template.jinja");
  command->add_option("--messages", args->messages, "JSON file: a list of {role, content, ...} messages")->required();
  command->add_flag("--add-generation-prompt", args->add_generation_prompt, "End with the assistant turn's header");
  command->add_option("--enable-thinking", args->enable_thinking, "Pass enable_thinking to the template")
      ->check(CLI::IsMember({"true", "false"}));
  command->add_option("--tools", args->tools, "JSON file: a list of tool definitions");
  command->add_option("--kwargs", args->kwargs,
                      "Template variables as a JSON object (reasoning_effort, preserve_thinking, ...)");
  command->add_option("--template-name", args->template_name, "Pick a named template (e.g. tool_use)");
  command->add_option("--template", args->template_file, "Render this .jinja file instead of the tokenizer's");
  command->callback([args] {
    VT_CHECK(!args->tokenizer.empty() || !args->template_file.empty(), "chat-template: give --tokenizer DIR or --template FILE");
    run_chat_template(*args);
  });
}

}  // namespace vt::apps
