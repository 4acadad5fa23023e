// Loading chat templates from a tokenizer folder and rendering them as HF's apply_chat_template.
#include "jinja/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace vt::jinja {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  VT_CHECK(in, path.string(), ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

ChatTemplateSet load_chat_templates(const std::filesystem::path& tokenizer_dir) {
  ChatTemplateSet set;
  const auto config_path = tokenizer_dir / "tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (std::filesystem::exists(config_path)) {
    try {
      config = nlohmann::ordered_json::parse(read_text(config_path));
    } catch (const nlohmann::json::exception& error) {
      VT_FAIL(config_path.string(), ": invalid JSON: ", error.what());
    }
    VT_CHECK(config.is_object(), config_path.string(), ": expected a JSON object");
  }
  // HF's named special tokens; an AddedToken dict contributes its "content".
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(name)) continue;
    const auto& token = config[name];
    if (token.is_string()) set.special_tokens.set(name, Value(token.get<std::string>()));
    else if (token.is_object() && token.contains("content") && token["content"].is_string())
      set.special_tokens.set(name, Value(token["content"].get<std::string>()));
  }
  // Template files take priority over the config's entries, as in transformers.
  const auto file = tokenizer_dir / "chat_template.jinja";
  if (std::filesystem::exists(file)) {
    set.templates["default"] = read_text(file);
    set.origin = file.string();
  }
  const auto extra_dir = tokenizer_dir / "additional_chat_templates";
  if (std::filesystem::is_directory(extra_dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(extra_dir)) {
      if (entry.path().extension() != ".jinja") continue;
      set.templates[entry.path().stem().string()] = read_text(entry.path());
      if (set.origin.empty()) set.origin = extra_dir.string();
    }
  }
  if (!set.templates.empty()) return set;
  VT_CHECK(config.contains("chat_template"), tokenizer_dir.string(),
           ": no chat template (neither chat_template.jinja nor a \"chat_template\" in tokenizer_config.json)");
  const auto& value = config["chat_template"];
  set.origin = config_path.string();
  if (value.is_string()) {
    set.templates["default"] = value.get<std::string>();
  } else if (value.is_array()) {
    for (const auto& item : value) {
      VT_CHECK(item.is_object() && item.contains("name") && item["name"].is_string() && item.contains("template") &&
                   item["template"].is_string(),
               config_path.string(), ": chat_template list entries must be {\"name\": ..., \"template\": ...}");
      set.templates[item["name"].get<std::string>()] = item["template"].get<std::string>();
    }
    VT_CHECK(!set.templates.empty(), config_path.string(), ": chat_template is an empty list");
  } else {
    VT_FAIL(config_path.string(), ": chat_template must be a string or a list of {name, template}");
  }
  return set;
}

const std::string& select_chat_template(const ChatTemplateSet& set, const std::string& name, bool with_tools) {
  if (!name.empty()) {
    const auto found = set.templates.find(name);
    if (found != set.templates.end()) return found->second;
    std::string names;
    for (const auto& [key, text] : set.templates) names += (names.empty() ? "" : ", ") + key;
    VT_FAIL(set.origin, ": no chat template named '", name, "' (available: ", names, ")");
  }
  if (with_tools && set.templates.count("tool_use")) return set.templates.at("tool_use");
  if (set.templates.count("default")) return set.templates.at("default");
  if (set.templates.size() == 1) return set.templates.begin()->second;
  std::string names;
  for (const auto& [key, text] : set.templates) names += (names.empty() ? "" : ", ") + key;
  VT_FAIL(set.origin, ": several chat templates and no default; choose one by name (", names, ")");
}

std::string apply_chat_template(const Template& chat_template, const Object& special_tokens, const ChatRequest& request) {
  VT_CHECK(request.messages.is_array(), "messages must be a JSON array");
  VT_CHECK(request.extra.is_object(), "extra template variables must be a JSON object");
  Object variables = special_tokens;
  for (const auto& [key, value] : request.extra.items()) variables.set(key, Value::from_json(value));
  variables.set("messages", Value::from_json(request.messages));
  variables.set("tools", Value::from_json(request.tools));
  variables.set("documents", Value::none());
  variables.set("add_generation_prompt", Value(request.add_generation_prompt));
  return chat_template.render(variables);
}

}  // namespace vt::jinja
