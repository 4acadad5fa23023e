// vt's Jinja rendering against Python jinja2's, byte for byte: engine feature cases and every chat
// template x conversation. Expected outputs come from render_with_jinja2.py (CTest fixture).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "jinja/chat_template.h"
#include "jinja/template.h"

namespace {

using Json = nlohmann::ordered_json;
using vt::jinja::TemplateError;

const Json& expected_cases() {
  static const Json cases = [] {
    std::ifstream in(VT_JINJA_EXPECTED, std::ios::binary);
    if (!in) return Json();
    std::ostringstream text;
    text << in.rdbuf();
    return Json::parse(text.str());
  }();
  return cases;
}

// Where two renderings first differ, with a little context, for a readable failure.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) + "\n  vt:     " +
         nlohmann::json(got.substr(from, 100)).dump() + "\n  jinja2: " + nlohmann::json(want.substr(from, 100)).dump();
}

std::string render_case(const Json& test_case) {
  const vt::jinja::Template compiled(test_case["template"].get<std::string>());
  if (!test_case.contains("request")) return compiled.render(test_case["variables"]);
  const Json& request_json = test_case["request"];
  vt::jinja::ChatRequest request;
  request.messages = request_json["messages"];
  request.tools = request_json["tools"];
  request.add_generation_prompt = request_json["add_generation_prompt"].get<bool>();
  request.extra = request_json["extra"];
  vt::jinja::Object special_tokens;
  for (const auto& [key, value] : test_case["special_tokens"].items())
    special_tokens.set(key, vt::jinja::Value(value.get<std::string>()));
  return vt::jinja::apply_chat_template(compiled, special_tokens, request);
}

// Checks every case whose id starts with `prefix`; returns how many there were.
int check_cases(const std::string& prefix) {
  int count = 0;
  for (const Json& test_case : expected_cases()["cases"]) {
    const std::string id = test_case["id"].get<std::string>();
    if (id.rfind(prefix, 0) != 0) continue;
    ++count;
    SCOPED_TRACE(id);
    if (test_case.contains("output")) {
      const std::string want = test_case["output"].get<std::string>();
      try {
        const std::string got = render_case(test_case);
        EXPECT_TRUE(got == want) << id << ": " << first_difference(got, want);
      } catch (const std::exception& error) {
        ADD_FAILURE() << id << ": vt failed where jinja2 rendered: " << error.what();
      }
      continue;
    }
    const std::string kind = test_case["error"].get<std::string>();
    const std::string message = test_case["message"].get<std::string>();
    try {
      const std::string got = render_case(test_case);
      ADD_FAILURE() << id << ": vt rendered where jinja2 failed (" << kind << ": " << message << "):\n" << got;
    } catch (const TemplateError& error) {
      if (kind == "raised") {
        EXPECT_EQ(error.kind(), TemplateError::Kind::kRaised) << id << ": " << error.what();
        EXPECT_EQ(error.message(), message) << id;
      } else if (kind == "syntax") {
        EXPECT_TRUE(error.kind() == TemplateError::Kind::kSyntax || error.kind() == TemplateError::Kind::kUnsupported)
            << id << ": jinja2 rejected the template (" << message << "), vt failed while rendering: " << error.what();
      } else {
        EXPECT_NE(error.kind(), TemplateError::Kind::kRaised) << id << ": " << error.what();
      }
      EXPECT_GT(error.location().line, 0) << id << ": error without a position: " << error.what();
    } catch (const std::exception& error) {
      ADD_FAILURE() << id << ": unexpected exception type: " << error.what();
    }
  }
  return count;
}

bool have_expected() {
  if (expected_cases().is_null()) {
    ADD_FAILURE() << VT_JINJA_EXPECTED << " is missing: the jinja2_render_expected CTest fixture writes it";
    return false;
  }
  return true;
}

TEST(AgainstJinja2, EngineFeatureCases) {
  if (!have_expected()) return;
  EXPECT_GE(check_cases("engine/"), 100);
}

TEST(AgainstJinja2, VtTestTemplates) {
  if (!have_expected()) return;
  EXPECT_GE(check_cases("vt_test/"), 100);
}

// The real templates fetched by scripts/fetch-chat-templates.sh (PyPI packages only).
class RealTemplate : public testing::TestWithParam<const char*> {};

TEST_P(RealTemplate, MatchesJinja2ForEveryConversation) {
  if (!have_expected()) return;
  const std::string name = GetParam();
  if (!std::filesystem::exists(std::string(VT_SOURCE_DIR) + "/.cache/chat_templates"))
    GTEST_SKIP() << "real chat templates not fetched: run scripts/fetch-chat-templates.sh";
  const int count = check_cases("real/" + name + "/");
  EXPECT_GE(count, 50) << "real template '" << name << "' missing from .cache/chat_templates";
}

INSTANTIATE_TEST_SUITE_P(ChatTemplates, RealTemplate,
                         testing::Values("smollm2", "qwen3", "qwen3_5", "qwen3_coder", "qwen2_5", "qwq", "smollm3"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
