// Chat templates of HF tokenizers: where a checkpoint keeps its template (chat_template.jinja,
// additional_chat_templates/*.jinja, or tokenizer_config.json's "chat_template" string or list of
// {name, template}) and how apply_chat_template renders it (variables and their precedence).
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "jinja/template.h"

namespace vt::jinja {

struct ChatTemplateSet {
  std::map<std::string, std::string> templates;  // name -> source ("default" when unnamed)
  Object special_tokens;  // bos_token, eos_token, ... from tokenizer_config.json, as HF passes them
  std::string origin;     // the file the templates came from, for messages
};

// Reads DIR's chat templates; throws vt::Error when DIR has none.
ChatTemplateSet load_chat_templates(const std::filesystem::path& tokenizer_dir);

// HF's get_chat_template: an explicit name, else "tool_use" when tools are given and it exists,
// else "default", else the only template.
const std::string& select_chat_template(const ChatTemplateSet& set, const std::string& name, bool with_tools);

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: no tools (the template sees None)
  bool add_generation_prompt = false;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // enable_thinking and other kwargs
};

// apply_chat_template(tokenize=False): special tokens, overridden by extra kwargs, plus messages,
// tools, documents=None and add_generation_prompt.
std::string apply_chat_template(const Template& chat_template, const Object& special_tokens, const ChatRequest& request);

}  // namespace vt::jinja
