// Finding a checkpoint's chat template (tokenizer_config.json string or named list,
// chat_template.jinja, additional_chat_templates/) and the variables apply_chat_template passes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "jinja/chat_template.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

class ChatTemplateFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("vt_chat_template_" + std::to_string(::getpid()) + "_" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::string render(const std::string& name, const vt::jinja::ChatRequest& request) {
    const auto set = vt::jinja::load_chat_templates(dir_);
    const vt::jinja::Template compiled(vt::jinja::select_chat_template(set, name, !request.tools.is_null()));
    return vt::jinja::apply_chat_template(compiled, set.special_tokens, request);
  }
  fs::path dir_;
};

TEST_F(ChatTemplateFiles, StringTemplateWithSpecialTokens) {
  write("tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false},
    "pad_token": null, "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{{ eos_token }}{% endfor %}{{ pad_token is defined }}{{ tools }}{{ documents }}{{ add_generation_prompt }}"})");
  vt::jinja::ChatRequest request;
  request.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(render("", request), "<s>user:hi</s>FalseNoneNoneFalse");
}

TEST_F(ChatTemplateFiles, ExtraVariablesOverrideSpecialTokens) {
  write("tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": "{{ bos_token }}|{{ enable_thinking }}"})");
  vt::jinja::ChatRequest request;
  request.extra = Json{{"bos_token", "<B>"}, {"enable_thinking", false}};
  EXPECT_EQ(render("", request), "<B>|False");
}

TEST_F(ChatTemplateFiles, NamedTemplatesPickToolUseWhenToolsAreGiven) {
  write("tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "plain"},
                                                        {"name": "tool_use", "template": "tools:{{ tools | length }}"}]})");
  vt::jinja::ChatRequest request;
  EXPECT_EQ(render("", request), "plain");
  request.tools = Json::parse(R"([{"name": "f"}])");
  EXPECT_EQ(render("", request), "tools:1");
  EXPECT_EQ(render("default", request), "plain");
  EXPECT_THROW(render("missing", request), vt::Error);
}

TEST_F(ChatTemplateFiles, JinjaFileTakesPriority) {
  write("tokenizer_config.json", R"({"eos_token": "</s>", "chat_template": "from config"})");
  write("chat_template.jinja", "from file{{ eos_token }}\n");
  EXPECT_EQ(render("", {}), "from file</s>");
  write("additional_chat_templates/rag.jinja", "rag template");
  EXPECT_EQ(render("rag", {}), "rag template");
}

TEST_F(ChatTemplateFiles, MissingOrMalformedConfigIsAClearError) {
  EXPECT_THROW(vt::jinja::load_chat_templates(dir_), vt::Error);
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  try {
    vt::jinja::load_chat_templates(dir_);
    ADD_FAILURE() << "no error";
  } catch (const vt::Error& error) {
    EXPECT_NE(std::string(error.what()).find("no chat template"), std::string::npos) << error.what();
  }
  write("tokenizer_config.json", R"({"chat_template": )");
  EXPECT_THROW(vt::jinja::load_chat_templates(dir_), vt::Error);
  write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_THROW(vt::jinja::load_chat_templates(dir_), vt::Error);
}

}  // namespace
