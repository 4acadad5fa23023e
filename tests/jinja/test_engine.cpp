// vt's Jinja engine on its own: error positions and messages for malformed templates, clear
// refusals of unsupported constructs, and the bounds that keep hostile templates from hanging.
#include <gtest/gtest.h>

#include <string>

#include "jinja/template.h"

namespace {

using vt::jinja::Template;
using vt::jinja::TemplateError;
using Json = nlohmann::ordered_json;

// Renders `source` expecting a TemplateError; returns it for inspection.
TemplateError render_error(const std::string& source, const Json& variables = Json::object()) {
  try {
    Template(source).render(variables);
  } catch (const TemplateError& error) {
    return error;
  }
  ADD_FAILURE() << "no error for: " << source;
  return TemplateError(TemplateError::Kind::kRender, "none");
}

void expect_error(const std::string& source, TemplateError::Kind kind, int line, int column,
                  const std::string& fragment) {
  const TemplateError error = render_error(source);
  EXPECT_EQ(error.kind(), kind) << error.what();
  if (line > 0) {
    EXPECT_EQ(error.location().line, line) << error.what();
  }
  if (column > 0) {
    EXPECT_EQ(error.location().column, column) << error.what();
  }
  EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
}

TEST(JinjaErrors, SyntaxErrorsCarryLineAndColumn) {
  expect_error("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}", TemplateError::Kind::kSyntax, 3, 10, "unexpected end of print statement");
  expect_error("{{ (1 }}", TemplateError::Kind::kSyntax, 1, 7, "unexpected '}', expected ')'");
  expect_error("a\nb {{ x ! y }}", TemplateError::Kind::kSyntax, 2, 8, "unexpected character '!'");
  expect_error("ok\n{# never closed", TemplateError::Kind::kSyntax, 2, 1, "comment");
  expect_error("{{ 'abc }}", TemplateError::Kind::kSyntax, 1, 4, "unterminated string");
  expect_error("x {{ y", TemplateError::Kind::kSyntax, 1, 3, "never closed");
  expect_error("{% frobnicate %}", TemplateError::Kind::kSyntax, 1, 4, "unknown tag 'frobnicate'");
  expect_error("{{ x | frobnicate }}", TemplateError::Kind::kSyntax, 1, 8, "no filter named 'frobnicate'");
  expect_error("{{ x is frobnicate }}", TemplateError::Kind::kSyntax, 1, 6, "no test named 'frobnicate'");
  expect_error("{% set 1 = 2 %}", TemplateError::Kind::kSyntax, 1, 8, "can't assign");
}

TEST(JinjaErrors, UnclosedBlockNamesTheOpenTag) {
  expect_error("{% for m in messages %}\n  {% if m %}\n{% endfor %}", TemplateError::Kind::kSyntax, 3, 4,
               "innermost open tag is 'if' at line 2");
  expect_error("{% if a %}\nx\n", TemplateError::Kind::kSyntax, 0, 0, "the 'if' tag at line 1, column 4 is never closed");
  expect_error("{% macro m() %}", TemplateError::Kind::kSyntax, 0, 0, "'macro' tag at line 1");
}

TEST(JinjaErrors, RenderErrorsCarryTheirLine) {
  expect_error("a\n\n  {{ 1 / 0 }}", TemplateError::Kind::kRender, 3, 6, "division by zero");
  expect_error("{% for m in [none] %}\n{{ m.content.startswith('x') }}{% endfor %}", TemplateError::Kind::kRender, 2, 0,
               "has no attribute 'content'");
  const TemplateError raised = render_error("{{ raise_exception('No messages provided.') }}");
  EXPECT_EQ(raised.kind(), TemplateError::Kind::kRaised);
  EXPECT_EQ(raised.message(), "No messages provided.");
}

TEST(JinjaErrors, UnsupportedConstructsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}x{% endcall %}", "caller"},
      {"{% call m() %}x{% endcall %}", "'{% call %}' tag"},
      {"{% extends 'base.html' %}", "'{% extends %}' tag"},
      {"{% include 'x.jinja' %}", "'{% include %}' tag"},
      {"{% import 'x' as y %}", "'{% import %}' tag"},
      {"{% block body %}{% endblock %}", "'{% block %}' tag"},
      {"{% for x in y recursive %}{% endfor %}", "recursive for loops"},
      {"{{ f(*args) }}", "'*args'"},
      {"{{ 'x' | wordwrap }}", "'wordwrap' filter"},
      {"{{ 'x' | format(1) }}", "'format' filter"},
      {"{{ 'a {}'.format(1) }}", "str.format()"},
      {"{{ 'a %s' % 1 }}", "printf-style"},
      {"{{ cycler('a') }}", "cycler()"},
      {"{{ '\xc7\x85' | upper }}", "case mapping of U+01C5"},
      {"{{ [1, 2] | map('string') }}", "printing a generator"},
      {"{{ 2 ** 64 }}", "beyond 64 bits"},
      {"{{ 99999999999999999999 }}", "64-bit"},
  };
  for (const auto& [source, fragment] : cases) {
    const TemplateError error = render_error(source, Json{{"y", Json::array()}});
    EXPECT_EQ(error.kind(), TemplateError::Kind::kUnsupported) << source << ": " << error.what();
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << source << ": " << error.what();
    EXPECT_NE(std::string(error.what()).find("unsupported by vt's Jinja engine"), std::string::npos) << error.what();
  }
}

TEST(JinjaErrors, MalformedUtf8IsASyntaxError) {
  expect_error(std::string("ok \xff\xfe {{ 1 }}"), TemplateError::Kind::kSyntax, 0, 0, "not valid UTF-8");
}

TEST(JinjaLimits, DeepNestingFailsCleanly) {
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  expect_error(deep, TemplateError::Kind::kSyntax, 1, 0, "nested more than");
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  expect_error(blocks, TemplateError::Kind::kSyntax, 1, 0, "nested more than");
  expect_error("{{ " + std::string(3000, '-') + "1 }}", TemplateError::Kind::kSyntax, 1, 0, "nested more than");
}

TEST(JinjaLimits, RunawayTemplatesStop) {
  expect_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", TemplateError::Kind::kRender, 1, 0, "nested deeper");
  expect_error("{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}{% endfor %}",
               TemplateError::Kind::kUnsupported, 1, 0, "2M steps");
  expect_error("{{ 'x' * 1000000000 }}", TemplateError::Kind::kUnsupported, 1, 0, "64 MiB");
  expect_error("{% set ns = namespace(v=[]) %}{% for i in range(2000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}",
               TemplateError::Kind::kUnsupported, 1, 0, "nested more than");
}

TEST(JinjaRender, OrderedJsonVariablesKeepKeyOrder) {
  const Json variables = Json::parse(R"({"d": {"z": 1, "a": 2, "m": {"y": true, "b": null}}})");
  EXPECT_EQ(Template("{{ d | tojson }}|{% for k in d %}{{ k }}{% endfor %}").render(variables),
            R"({"z": 1, "a": 2, "m": {"y": true, "b": null}}|zam)");
}

TEST(JinjaRender, TemplateRendersRepeatedlyWithFreshState) {
  const Template compiled("{% set ns = namespace(n=0) %}{% for m in items %}{% set ns.n = ns.n + m %}{% endfor %}{{ ns.n }}");
  EXPECT_EQ(compiled.render(Json{{"items", {1, 2, 3}}}), "6");
  EXPECT_EQ(compiled.render(Json{{"items", {10}}}), "10");
}

TEST(JinjaRender, WhitespaceControlOptionsOff) {
  vt::jinja::LexerOptions plain;
  plain.trim_blocks = false;
  plain.lstrip_blocks = false;
  EXPECT_EQ(Template("  {% if true %}\nx\n  {% endif %}\n", plain).render(Json::object()), "  \nx\n  ");
  EXPECT_EQ(Template("  {% if true %}\nx\n  {% endif %}\n").render(Json::object()), "x\n");
}

}  // namespace
