// `vt parse-output`: a raw model output through the server's streaming output parser, fed N bytes
// at a time; prints what it parsed to. The result must not depend on N.
//   vt parse-output --format qwen3_coder|hermes [--tools FILE.json] [--thinking on|off]
//                   [--chunk-bytes N] --file OUTPUT.txt [--json]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "apps/commands.h"
#include "core/error.h"
#include "server/output_parser.h"

namespace {

struct ParseOutputArgs {
  std::string format = "qwen3_coder", tools, thinking = "off", file;
  size_t chunk_bytes = 0;
  bool json = false;
};

std::string read_file(const std::string& path, const char* option) {
  std::ifstream in(path, std::ios::binary);
  VT_CHECK(in, option, " ", path, ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void run_parse_output(const ParseOutputArgs& args) {
  vt::server::OutputParserOptions options;
  options.format = vt::server::parse_tool_call_format(args.format);
  options.reasoning = args.thinking == "on";
  if (!args.tools.empty()) {
    const std::string text = read_file(args.tools, "--tools");
    options.tools = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    VT_CHECK(options.tools.is_array(), "--tools ", args.tools, ": expected a JSON list of tool definitions");
  }
  const std::string output = read_file(args.file, "--file");
  const auto parsed = vt::server::parse_output(options, output, args.chunk_bytes);
  const std::string text = parsed.to_json().dump(args.json ? -1 : 2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::printf("%s\n", text.c_str());
}

}  // namespace

namespace vt::apps {

void add_parse_output_commands(CLI::App& app) {
  auto args = std::make_shared<ParseOutputArgs>();
  CLI::App* command = app.add_subcommand("parse-output", "Parse a raw model output as the server does (reasoning, content, tool calls)");
  command->add_option("--format", args->format, "Tool-call format")
      ->check(CLI::IsMember({"qwen3_coder", "hermes", "none"}));
  command->add_option("--tools", args->tools, "JSON file: the request's tool definitions (types XML values)");
  command->add_option("--thinking", args->thinking, "The prompt opened <think>: the output starts as reasoning")
      ->check(CLI::IsMember({"on", "off"}));
  command->add_option("--chunk-bytes", args->chunk_bytes, "Feed the parser this many bytes at a time (0: all at once)");
  command->add_option("--file", args->file, "The raw output")->required();
  command->add_flag("--json", args->json, "One line of JSON (else indented)");
  command->callback([args] { run_parse_output(*args); });
}

}  // namespace vt::apps
