// Jinja lexer: splits template source into data and tag tokens exactly as jinja2's lexer does,
// including whitespace control (`{%-`, `-%}`, `{%+`, `+%}`), trim_blocks and lstrip_blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/error.h"

namespace vt::jinja {

struct LexerOptions {
  bool trim_blocks = true;    // drop the first newline after a block or comment tag
  bool lstrip_blocks = true;  // drop spaces and tabs before a block or comment tag on its own line
};

struct Token {
  enum class Kind { kData, kVariableBegin, kVariableEnd, kBlockBegin, kBlockEnd, kName, kString,
                    kInteger, kFloat, kOperator, kEof };
  Kind kind;
  std::string text;  // data, name, decoded string literal, or operator spelling
  int64_t integer = 0;
  double number = 0;
  Location location;
};

// Throws TemplateError (kSyntax) with the position of the offending character.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace vt::jinja
