// The parsed template: expressions and statements, mirroring jinja2's nodes for the subset vt runs.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/error.h"
#include "jinja/value.h"

namespace vt::jinja {

struct Expression;
using ExpressionPtr = std::unique_ptr<Expression>;

struct CallArguments {
  std::vector<ExpressionPtr> positional;
  std::vector<std::pair<std::string, ExpressionPtr>> keyword;
};

struct Expression {
  enum class Kind {
    kConstant,      // constant
    kName,          // name
    kNamespaceRef,  // name.attribute as an assignment target (`set ns.x = ...`)
    kList,          // operands
    kTuple,         // operands
    kDict,          // operands: key, value, key, value, ...
    kAttribute,     // operands[0] . name
    kItem,          // operands[0] [ operands[1] ]
    kSlice,         // start, stop, step (each may be null)
    kCall,          // operands[0] ( arguments )
    kFilter,        // operands[0] (null in a filter block) | name ( arguments )
    kTest,          // operands[0] is name ( arguments )
    kNot,
    kNegate,
    kPositive,
    kBinary,        // operands[0] name operands[1]; name is + - * / // % **
    kAnd,
    kOr,
    kCompare,       // operands[0] then operators[i] applied with operands[i + 1], chained
    kConcat,        // ~ over all operands
    kConditional,   // operands: value-if-true, condition, value-if-false (may be null)
  };

  Kind kind;
  Location location;
  Value constant;
  std::string name;
  std::string attribute;
  std::vector<ExpressionPtr> operands;
  std::vector<std::string> operators;
  CallArguments arguments;
};

struct Statement;
using StatementPtr = std::unique_ptr<Statement>;
using Body = std::vector<StatementPtr>;

struct Statement {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expression }}
    kIf,           // branches (condition, body), else_body
    kFor,          // target in expression [if condition]: body, else_body
    kSet,          // target = expression
    kSetBlock,     // {% set target %}body{% endset %}, optional filter in expression
    kMacro,        // name(parameters = defaults): body
    kFilterBlock,  // {% filter expression %}body{% endfilter %}
    kWith,         // {% with targets = values %}body{% endwith %}
    kScope,        // a body rendered in place ({% generation %})
    kBreak,
    kContinue,
  };

  Kind kind;
  Location location;
  std::string text;
  ExpressionPtr expression;
  ExpressionPtr target;
  ExpressionPtr condition;
  std::vector<std::pair<ExpressionPtr, Body>> branches;
  Body body;
  Body else_body;
  // Macros: parameter names with defaults for the trailing ones; whether the body reads the
  // implicit `varargs` / `kwargs` (jinja2 then accepts extra arguments).
  std::string name;
  std::vector<std::string> parameters;
  std::vector<ExpressionPtr> defaults;
  bool uses_varargs = false;
  bool uses_kwargs = false;
  // With: assignments.
  std::vector<std::pair<ExpressionPtr, ExpressionPtr>> assignments;
};

}  // namespace vt::jinja
