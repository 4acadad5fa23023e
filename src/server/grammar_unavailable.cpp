// Structured output where vt was built without xgrammar (its sources could not be fetched): a
// request that asks for a structure gets a 400 that says so; others are served as usual.
#include "server/grammar.h"

#include "server/validation.h"

namespace vt::server {

struct StructuredOutput::Impl {};

StructuredOutput::StructuredOutput(const Tokenizer&, int64_t, std::vector<int32_t>) {}

StructuredOutput::~StructuredOutput() = default;

ConstraintFactory StructuredOutput::constraint_for(const ChatOptions& options, const OutputParserOptions&) {
  if (!wants_structure(options)) return nullptr;
  throw ApiError(400,
                 "structured output (response_format json_object/json_schema, tool_choice required or named) is not "
                 "available: this vt was built without xgrammar (scripts/fetch-xgrammar.sh, then rebuild)",
                 options.response_format != ResponseFormat::kText ? "response_format" : "tool_choice");
}

}  // namespace vt::server
