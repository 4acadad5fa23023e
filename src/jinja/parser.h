// Jinja parser: tokens to a statement tree, following jinja2/parser.py (operator precedence,
// tuples, filters and tests, statement tags). Unknown or unsupported tags, filters and tests are
// errors here, before anything renders.
#pragma once

#include <string_view>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace vt::jinja {

Body parse(std::string_view source, const LexerOptions& options = {});

}  // namespace vt::jinja
