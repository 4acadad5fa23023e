// The output parser on tests/parsers/cases.json (the family's outputs: reasoning on and off, XML
// and Hermes calls, typed values, cut outputs) at several chunk sizes: the joined result must be
// the expected one and the same at every size; plus the shape of streamed tool-call pieces.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/output_parser.h"

namespace vt::server {
namespace {

using Json = nlohmann::json;

Json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream text;
  text << in.rdbuf();
  return Json::parse(text.str());
}

const std::string kDir = std::string(VT_SOURCE_DIR) + "/tests/parsers/";

OutputParserOptions options_for(const Json& test_case, const Json& tools) {
  OutputParserOptions options;
  options.format = parse_tool_call_format(test_case["format"].get<std::string>());
  options.reasoning = test_case["thinking"] == "on";
  options.tools = tools;
  return options;
}

TEST(OutputParser, TableAtEveryChunkSize) {
  const Json tools = read_json(kDir + "tools.json");
  const Json cases = read_json(kDir + "cases.json");
  ASSERT_GE(cases.size(), 40u);
  for (const Json& test_case : cases) {
    SCOPED_TRACE(test_case["name"].get<std::string>());
    const std::string output = test_case["output"];
    const OutputParserOptions options = options_for(test_case, tools);
    const std::string whole = parse_output(options, output, 0).to_json().dump();
    for (size_t chunk : {1, 2, 3, 7, 64}) {
      EXPECT_EQ(parse_output(options, output, chunk).to_json().dump(), whole) << "chunk bytes " << chunk;
    }
    const Json result = Json::parse(whole);
    const Json& expected = test_case["expected"];
    EXPECT_EQ(result["reasoning_content"], expected["reasoning_content"]);
    EXPECT_EQ(result["content"], expected["content"]);
    ASSERT_EQ(result["tool_calls"].size(), expected["tool_calls"].size()) << whole;
    for (size_t i = 0; i < expected["tool_calls"].size(); ++i) {
      const Json& call = result["tool_calls"][i];
      EXPECT_EQ(call["type"], "function");
      EXPECT_EQ(call["function"]["name"], expected["tool_calls"][i]["name"]);
      const Json arguments = Json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
      EXPECT_EQ(arguments, expected["tool_calls"][i]["arguments"]) << call["function"]["arguments"];
    }
  }
}

TEST(OutputParser, StreamedCallPiecesNameFirstThenArguments) {
  OutputParserOptions options;
  options.format = ToolCallFormat::kQwen3Coder;
  options.tools = read_json(kDir + "tools.json");
  OutputParser parser(options);
  const std::string output =
      "Checking.\n<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n"
      "<parameter=content>\nsome long text\n</parameter>\n</function>\n</tool_call>";
  std::vector<ToolCallDelta> pieces;
  std::string content;
  for (char c : output) {
    OutputDelta delta = parser.feed(std::string_view(&c, 1));
    content += delta.content;
    pieces.insert(pieces.end(), delta.tool_calls.begin(), delta.tool_calls.end());
  }
  OutputDelta last = parser.finish();
  pieces.insert(pieces.end(), last.tool_calls.begin(), last.tool_calls.end());
  EXPECT_EQ(content, "Checking.");
  ASSERT_GT(pieces.size(), 3u);  // string values stream as they come
  EXPECT_EQ(pieces[0].name, "write_file");
  std::string arguments;
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].index, 0);
    if (i > 0) {
      EXPECT_TRUE(pieces[i].name.empty());
    }
    arguments += pieces[i].arguments;
  }
  EXPECT_EQ(Json::parse(arguments), (Json{{"path", "a.txt"}, {"content", "some long text"}}));
  EXPECT_TRUE(parser.saw_tool_call());
}

TEST(OutputParser, ReasoningDoneOnlyAfterThinkCloses) {
  OutputParserOptions options;
  options.reasoning = true;
  OutputParser parser(options);
  parser.feed("thinking </thi");
  EXPECT_FALSE(parser.reasoning_done());
  parser.feed("nk>");
  EXPECT_TRUE(parser.reasoning_done());
  OutputParser plain(OutputParserOptions{});
  EXPECT_TRUE(plain.reasoning_done());
}

TEST(OutputParser, FormatAndPromptDetection) {
  EXPECT_EQ(detect_tool_call_format("x <tool_call>\n<function=example> y"), ToolCallFormat::kQwen3Coder);
  EXPECT_EQ(detect_tool_call_format("x <tool_call>\n{\"name\": y"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{ messages }}"), ToolCallFormat::kNone);
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>user\nwhat is <think>?<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_THROW(parse_tool_call_format("xml"), std::exception);
}

}  // namespace
}  // namespace vt::server
