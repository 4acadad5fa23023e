// Recursive-descent Jinja parser, a transcription of jinja2/parser.py for the supported subset.
#include "jinja/parser.h"

#include <functional>

#include "jinja/builtins.h"

namespace vt::jinja {
namespace {

using TokenKind = Token::Kind;

// Python's jinja2 hits its recursion limit on deep nesting too; vt stops at a fixed depth instead
// of overflowing the stack.
constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse_template() {
    Body body = subparse({});
    return body;
  }

 private:
  struct NestingGuard {
    Parser& parser;
    explicit NestingGuard(Parser& owner) : parser(owner) {
      if (++parser.nesting_ > kMaxNesting)
        parser.fail_here(vt::str("template nested more than ", kMaxNesting, " levels deep"));
    }
    ~NestingGuard() { --parser.nesting_; }
  };

  // ---- token stream ----
  const Token& current() const { return tokens_[position_]; }
  const Token& look() const { return tokens_[std::min(position_ + 1, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& token = tokens_[position_];
    if (position_ + 1 < tokens_.size()) ++position_;
    return token;
  }
  bool is_operator(std::string_view op) const { return current().kind == TokenKind::kOperator && current().text == op; }
  bool is_name(std::string_view name) const { return current().kind == TokenKind::kName && current().text == name; }
  bool skip_operator(std::string_view op) {
    if (!is_operator(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& token) {
    switch (token.kind) {
      case TokenKind::kData: return "template data";
      case TokenKind::kVariableBegin: return "'{{'";
      case TokenKind::kVariableEnd: return "end of print statement '}}'";
      case TokenKind::kBlockBegin: return "'{%'";
      case TokenKind::kBlockEnd: return "end of statement block '%}'";
      case TokenKind::kName: return "'" + token.text + "'";
      case TokenKind::kString: return "string";
      case TokenKind::kInteger: return "integer";
      case TokenKind::kFloat: return "float";
      case TokenKind::kOperator: return "'" + token.text + "'";
      case TokenKind::kEof: return "end of template";
    }
    return "token";
  }

  [[noreturn]] void fail(const std::string& message, Location location) const {
    throw TemplateError(TemplateError::Kind::kSyntax, message, location);
  }
  [[noreturn]] void fail_here(const std::string& message) const { fail(message, current().location); }
  [[noreturn]] void unsupported(const std::string& message, Location location) const {
    throw TemplateError(TemplateError::Kind::kUnsupported, message, location);
  }

  void expect_operator(std::string_view op) {
    if (!skip_operator(op)) fail_here("expected '" + std::string(op) + "', got " + describe(current()));
  }
  void expect_kind(TokenKind kind, const char* what) {
    if (current().kind != kind) {
      if (current().kind == TokenKind::kEof) fail_eof();
      fail_here(std::string("expected ") + what + ", got " + describe(current()));
    }
    next();
  }
  std::string expect_name() {
    if (current().kind != TokenKind::kName) fail_here("expected a name, got " + describe(current()));
    return next().text;
  }
  void expect_name(std::string_view name) {
    if (!skip_name(name)) fail_here("expected '" + std::string(name) + "', got " + describe(current()));
  }

  [[noreturn]] void fail_eof() const {
    std::string message = "unexpected end of template";
    if (!open_tags_.empty()) {
      const auto& [tag, location] = open_tags_.back();
      message += vt::str("; the '", tag, "' tag at line ", location.line, ", column ", location.column,
                         " is never closed");
    }
    fail(message, current().location);
  }

  ExpressionPtr make(Expression::Kind kind, Location location) {
    auto expression = std::make_unique<Expression>();
    expression->kind = kind;
    expression->location = location;
    return expression;
  }

  // ---- statements ----
  // Parses until a block tag whose name is in `end_names`; leaves the stream at that name.
  Body subparse(const std::vector<std::string_view>& end_names) {
    Body body;
    while (true) {
      const Token& token = current();
      if (token.kind == TokenKind::kEof) {
        if (!end_names.empty()) fail_eof();
        return body;
      }
      if (token.kind == TokenKind::kData) {
        auto statement = std::make_unique<Statement>();
        statement->kind = Statement::Kind::kText;
        statement->location = token.location;
        statement->text = token.text;
        body.push_back(std::move(statement));
        next();
      } else if (token.kind == TokenKind::kVariableBegin) {
        next();
        auto statement = std::make_unique<Statement>();
        statement->kind = Statement::Kind::kOutput;
        statement->location = current().location;
        statement->expression = parse_tuple(false, true, {});
        expect_kind(TokenKind::kVariableEnd, "'}}'");
        body.push_back(std::move(statement));
      } else if (token.kind == TokenKind::kBlockBegin) {
        next();
        for (std::string_view end : end_names)
          if (is_name(end)) return body;
        body.push_back(parse_statement());
        expect_kind(TokenKind::kBlockEnd, "'%}'");
      } else {
        fail_here("unexpected " + describe(token));
      }
    }
  }

  // After the tag's own tokens: `%}`, then the body up to one of `end_names` (stream left there).
  Body parse_body(const std::vector<std::string_view>& end_names) {
    skip_operator(":");
    expect_kind(TokenKind::kBlockEnd, "'%}'");
    return subparse(end_names);
  }

  StatementPtr new_statement(Statement::Kind kind, Location location) {
    auto statement = std::make_unique<Statement>();
    statement->kind = kind;
    statement->location = location;
    return statement;
  }

  StatementPtr parse_statement() {
    NestingGuard guard(*this);
    const Token& token = current();
    if (token.kind != TokenKind::kName) fail_here("tag name expected, got " + describe(token));
    const std::string tag = token.text;
    const Location location = token.location;
    open_tags_.emplace_back(tag, location);
    StatementPtr statement;
    if (tag == "if") statement = parse_if();
    else if (tag == "for") statement = parse_for();
    else if (tag == "set") statement = parse_set();
    else if (tag == "macro") statement = parse_macro();
    else if (tag == "filter") statement = parse_filter_block();
    else if (tag == "with") statement = parse_with();
    else if (tag == "generation") statement = parse_scope("endgeneration");
    else if (tag == "print") statement = parse_print();
    else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop", location);
      next();
      statement = new_statement(tag == "break" ? Statement::Kind::kBreak : Statement::Kind::kContinue, location);
    } else if (tag == "call" || tag == "block" || tag == "extends" || tag == "include" || tag == "import" ||
               tag == "from" || tag == "autoescape" || tag == "do" || tag == "trans") {
      unsupported("the '{% " + tag + " %}' tag", location);
    } else {
      open_tags_.pop_back();
      std::string message = "unknown tag '" + tag + "'";
      if (!open_tags_.empty())
        message += vt::str("; the innermost open tag is '", open_tags_.back().first, "' at line ",
                           open_tags_.back().second.line);
      fail(message, location);
    }
    open_tags_.pop_back();
    return statement;
  }

  StatementPtr parse_if() {
    auto statement = new_statement(Statement::Kind::kIf, next().location);
    while (true) {
      ExpressionPtr condition = parse_tuple(false, false, {});
      Body body = parse_body({"elif", "else", "endif"});
      statement->branches.emplace_back(std::move(condition), std::move(body));
      const std::string tag = next().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        statement->else_body = parse_body({"endif"});
        next();
      }
      break;
    }
    return statement;
  }

  StatementPtr parse_for() {
    auto statement = new_statement(Statement::Kind::kFor, next().location);
    statement->target = parse_assign_target(true, {"in"}, false);
    expect_name("in");
    statement->expression = parse_tuple(false, false, {"recursive"});
    if (skip_name("if")) statement->condition = parse_expression(true);
    if (is_name("recursive")) unsupported("recursive for loops", current().location);
    ++loop_depth_;
    statement->body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (next().text == "else") {
      statement->else_body = parse_body({"endfor"});
      next();
    }
    return statement;
  }

  StatementPtr parse_set() {
    auto statement = new_statement(Statement::Kind::kSet, next().location);
    statement->target = parse_assign_target(true, {}, true);
    if (skip_operator("=")) {
      statement->expression = parse_tuple(false, true, {});
      return statement;
    }
    statement->kind = Statement::Kind::kSetBlock;
    if (is_operator("|")) statement->expression = parse_filter(nullptr, false);
    statement->body = parse_body({"endset"});
    next();
    return statement;
  }

  StatementPtr parse_macro() {
    auto statement = new_statement(Statement::Kind::kMacro, next().location);
    statement->name = expect_name();
    expect_operator("(");
    while (!is_operator(")")) {
      if (!statement->parameters.empty()) expect_operator(",");
      statement->parameters.push_back(expect_name());
      if (skip_operator("=")) statement->defaults.push_back(parse_expression(true));
      else if (!statement->defaults.empty()) fail_here("non-default argument follows default argument");
    }
    expect_operator(")");
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;
    statement->body = parse_body({"endmacro"});
    loop_depth_ = saved_depth;
    next();
    statement->uses_varargs = body_reads(statement->body, "varargs");
    statement->uses_kwargs = body_reads(statement->body, "kwargs");
    if (body_reads(statement->body, "caller")) unsupported("'caller' in macros (call blocks)", statement->location);
    return statement;
  }

  StatementPtr parse_filter_block() {
    auto statement = new_statement(Statement::Kind::kFilterBlock, next().location);
    statement->expression = parse_filter(nullptr, true);
    statement->body = parse_body({"endfilter"});
    next();
    return statement;
  }

  StatementPtr parse_with() {
    auto statement = new_statement(Statement::Kind::kWith, next().location);
    while (current().kind != TokenKind::kBlockEnd) {
      if (!statement->assignments.empty()) expect_operator(",");
      ExpressionPtr target = parse_assign_target(false, {}, false);
      expect_operator("=");
      statement->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    statement->body = parse_body({"endwith"});
    next();
    return statement;
  }

  StatementPtr parse_scope(std::string_view end) {
    auto statement = new_statement(Statement::Kind::kScope, next().location);
    statement->body = parse_body({end});
    next();
    return statement;
  }

  StatementPtr parse_print() {
    auto statement = new_statement(Statement::Kind::kOutput, next().location);
    auto tuple = make(Expression::Kind::kTuple, statement->location);
    while (current().kind != TokenKind::kBlockEnd) {
      if (!tuple->operands.empty()) expect_operator(",");
      tuple->operands.push_back(parse_expression(true));
    }
    // {% print a, b %} writes each expression in turn, like jinja2's Output node.
    auto concat = make(Expression::Kind::kConcat, statement->location);
    concat->operands = std::move(tuple->operands);
    statement->expression = std::move(concat);
    return statement;
  }

  // Does any expression in `body` read the name `name`?
  static bool body_reads(const Body& body, std::string_view name) {
    std::function<bool(const Expression*)> reads = [&](const Expression* expression) {
      if (!expression) return false;
      if (expression->kind == Expression::Kind::kName && expression->name == name) return true;
      for (const auto& operand : expression->operands)
        if (reads(operand.get())) return true;
      for (const auto& argument : expression->arguments.positional)
        if (reads(argument.get())) return true;
      for (const auto& [key, argument] : expression->arguments.keyword)
        if (reads(argument.get())) return true;
      return false;
    };
    std::function<bool(const Body&)> walk = [&](const Body& statements) {
      for (const auto& statement : statements) {
        if (statement->kind == Statement::Kind::kMacro) continue;  // its own scope
        if (reads(statement->expression.get()) || reads(statement->condition.get())) return true;
        for (const auto& [condition, branch] : statement->branches)
          if (reads(condition.get()) || walk(branch)) return true;
        for (const auto& [target, value] : statement->assignments)
          if (reads(value.get())) return true;
        if (walk(statement->body) || walk(statement->else_body)) return true;
      }
      return false;
    };
    return walk(body);
  }

  // ---- assignment targets ----
  ExpressionPtr parse_assign_target(bool with_tuple, const std::vector<std::string_view>& extra_end,
                                    bool with_namespace) {
    ExpressionPtr target;
    if (with_tuple) {
      target = parse_tuple(true, true, extra_end, false, with_namespace);
    } else {
      target = parse_primary(with_namespace);
    }
    check_assignable(*target);
    return target;
  }

  void check_assignable(const Expression& target) {
    if (target.kind == Expression::Kind::kName || target.kind == Expression::Kind::kNamespaceRef) {
      if (target.kind == Expression::Kind::kName &&
          (target.name == "true" || target.name == "false" || target.name == "none"))
        fail("can't assign to '" + target.name + "'", target.location);
      return;
    }
    if (target.kind == Expression::Kind::kTuple) {
      for (const auto& item : target.operands) check_assignable(*item);
      return;
    }
    fail("can't assign to this expression", target.location);
  }

  // ---- expressions ----
  bool is_tuple_end(const std::vector<std::string_view>& extra_end) const {
    const TokenKind kind = current().kind;
    if (kind == TokenKind::kVariableEnd || kind == TokenKind::kBlockEnd || is_operator(")")) return true;
    for (std::string_view name : extra_end)
      if (is_name(name)) return true;
    return false;
  }

  ExpressionPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string_view>& extra_end,
                            bool explicit_parentheses = false, bool with_namespace = false) {
    const Location location = current().location;
    std::vector<ExpressionPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_operator(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
      if (is_operator(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) {
        if (current().kind == TokenKind::kEof) fail_eof();
        fail_here("expected an expression, got " + describe(current()));
      }
    }
    auto tuple = make(Expression::Kind::kTuple, location);
    tuple->operands = std::move(items);
    return tuple;
  }

  ExpressionPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExpressionPtr parse_condexpr() {
    Location location = current().location;
    ExpressionPtr value = parse_or();
    while (skip_name("if")) {
      auto conditional = make(Expression::Kind::kConditional, location);
      ExpressionPtr condition = parse_or();
      ExpressionPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      conditional->operands.push_back(std::move(value));
      conditional->operands.push_back(std::move(condition));
      conditional->operands.push_back(std::move(otherwise));
      value = std::move(conditional);
      location = current().location;
    }
    return value;
  }

  ExpressionPtr binary(Expression::Kind kind, Location location, ExpressionPtr left, ExpressionPtr right,
                       std::string op = {}) {
    auto node = make(kind, location);
    node->name = std::move(op);
    node->operands.push_back(std::move(left));
    node->operands.push_back(std::move(right));
    return node;
  }

  ExpressionPtr parse_or() {
    const Location location = current().location;
    ExpressionPtr left = parse_and();
    while (skip_name("or")) left = binary(Expression::Kind::kOr, location, std::move(left), parse_and());
    return left;
  }

  ExpressionPtr parse_and() {
    const Location location = current().location;
    ExpressionPtr left = parse_not();
    while (skip_name("and")) left = binary(Expression::Kind::kAnd, location, std::move(left), parse_not());
    return left;
  }

  ExpressionPtr parse_not() {
    NestingGuard guard(*this);
    if (is_name("not")) {
      auto node = make(Expression::Kind::kNot, next().location);
      node->operands.push_back(parse_not());
      return node;
    }
    return parse_compare();
  }

  ExpressionPtr parse_compare() {
    const Location location = current().location;
    ExpressionPtr first = parse_math1();
    auto compare = make(Expression::Kind::kCompare, location);
    while (true) {
      std::string op;
      if (current().kind == TokenKind::kOperator &&
          (current().text == "==" || current().text == "!=" || current().text == "<" ||
           current().text == "<=" || current().text == ">" || current().text == ">=")) {
        op = next().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && look().kind == TokenKind::kName && look().text == "in") {
        next(), next();
        op = "not in";
      } else {
        break;
      }
      compare->operators.push_back(op);
      compare->operands.push_back(parse_math1());
    }
    if (compare->operators.empty()) return first;
    compare->operands.insert(compare->operands.begin(), std::move(first));
    return compare;
  }

  ExpressionPtr parse_math1() {
    const Location location = current().location;
    ExpressionPtr left = parse_concat();
    while (is_operator("+") || is_operator("-")) {
      const std::string op = next().text;
      left = binary(Expression::Kind::kBinary, location, std::move(left), parse_concat(), op);
    }
    return left;
  }

  ExpressionPtr parse_concat() {
    const Location location = current().location;
    ExpressionPtr first = parse_math2();
    if (!is_operator("~")) return first;
    auto concat = make(Expression::Kind::kConcat, location);
    concat->operands.push_back(std::move(first));
    while (skip_operator("~")) concat->operands.push_back(parse_math2());
    return concat;
  }

  ExpressionPtr parse_math2() {
    const Location location = current().location;
    ExpressionPtr left = parse_pow();
    while (is_operator("*") || is_operator("/") || is_operator("//") || is_operator("%")) {
      const std::string op = next().text;
      left = binary(Expression::Kind::kBinary, location, std::move(left), parse_pow(), op);
    }
    return left;
  }

  ExpressionPtr parse_pow() {
    const Location location = current().location;
    ExpressionPtr left = parse_unary(true);
    while (skip_operator("**"))
      left = binary(Expression::Kind::kBinary, location, std::move(left), parse_unary(true), "**");
    return left;
  }

  ExpressionPtr parse_unary(bool with_filter) {
    NestingGuard guard(*this);
    const Location location = current().location;
    ExpressionPtr node;
    if (skip_operator("-")) {
      node = make(Expression::Kind::kNegate, location);
      node->operands.push_back(parse_unary(false));
    } else if (skip_operator("+")) {
      node = make(Expression::Kind::kPositive, location);
      node->operands.push_back(parse_unary(false));
    } else {
      node = parse_primary(false);
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expression(std::move(node));
    return node;
  }

  ExpressionPtr parse_primary(bool with_namespace) {
    const Token& token = current();
    const Location location = token.location;
    if (token.kind == TokenKind::kName) {
      const std::string name = next().text;
      auto node = make(Expression::Kind::kConstant, location);
      if (name == "true" || name == "True") node->constant = Value(true);
      else if (name == "false" || name == "False") node->constant = Value(false);
      else if (name == "none" || name == "None") node->constant = Value::none();
      else if (with_namespace && is_operator(".")) {
        next();
        node->kind = Expression::Kind::kNamespaceRef;
        node->name = name;
        node->attribute = expect_name();
      } else {
        node->kind = Expression::Kind::kName;
        node->name = name;
      }
      return node;
    }
    if (token.kind == TokenKind::kString) {
      std::string text;
      while (current().kind == TokenKind::kString) text += next().text;  // adjacent literals join
      auto node = make(Expression::Kind::kConstant, location);
      node->constant = Value(std::move(text));
      return node;
    }
    if (token.kind == TokenKind::kInteger || token.kind == TokenKind::kFloat) {
      auto node = make(Expression::Kind::kConstant, location);
      node->constant = token.kind == TokenKind::kInteger ? Value(token.integer) : Value(token.number);
      next();
      return node;
    }
    if (skip_operator("(")) {
      ExpressionPtr node = parse_tuple(false, true, {}, true);
      expect_operator(")");
      return node;
    }
    if (skip_operator("[")) {
      auto node = make(Expression::Kind::kList, location);
      while (!is_operator("]")) {
        if (!node->operands.empty()) expect_operator(",");
        if (is_operator("]")) break;
        node->operands.push_back(parse_expression(true));
      }
      expect_operator("]");
      return node;
    }
    if (skip_operator("{")) {
      auto node = make(Expression::Kind::kDict, location);
      while (!is_operator("}")) {
        if (!node->operands.empty()) expect_operator(",");
        if (is_operator("}")) break;
        node->operands.push_back(parse_expression(true));
        expect_operator(":");
        node->operands.push_back(parse_expression(true));
      }
      expect_operator("}");
      return node;
    }
    if (token.kind == TokenKind::kEof) fail_eof();
    fail_here("unexpected " + describe(token));
  }

  ExpressionPtr parse_postfix(ExpressionPtr node) {
    while (true) {
      if (is_operator(".") || is_operator("[")) node = parse_subscript(std::move(node));
      else if (is_operator("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExpressionPtr parse_filter_expression(ExpressionPtr node) {
    while (true) {
      if (is_operator("|")) node = parse_filter(std::move(node), false);
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_operator("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExpressionPtr parse_subscript(ExpressionPtr node) {
    const Token& token = next();
    const Location location = token.location;
    if (token.text == ".") {
      const Token& attribute = current();
      if (attribute.kind == TokenKind::kName) {
        auto access = make(Expression::Kind::kAttribute, location);
        access->name = next().text;
        access->operands.push_back(std::move(node));
        return access;
      }
      if (attribute.kind != TokenKind::kInteger) fail_here("expected name or number after '.'");
      auto item = make(Expression::Kind::kItem, location);
      auto key = make(Expression::Kind::kConstant, attribute.location);
      key->constant = Value(attribute.integer);
      next();
      item->operands.push_back(std::move(node));
      item->operands.push_back(std::move(key));
      return item;
    }
    std::vector<ExpressionPtr> arguments;
    while (!is_operator("]")) {
      if (!arguments.empty()) expect_operator(",");
      arguments.push_back(parse_subscribed());
    }
    expect_operator("]");
    auto item = make(Expression::Kind::kItem, location);
    item->operands.push_back(std::move(node));
    if (arguments.size() == 1) {
      item->operands.push_back(std::move(arguments[0]));
    } else {
      auto tuple = make(Expression::Kind::kTuple, location);
      tuple->operands = std::move(arguments);
      item->operands.push_back(std::move(tuple));
    }
    return item;
  }

  ExpressionPtr parse_subscribed() {
    const Location location = current().location;
    std::vector<ExpressionPtr> parts;
    if (skip_operator(":")) {
      parts.push_back(nullptr);
    } else {
      ExpressionPtr node = parse_expression(true);
      if (!is_operator(":")) return node;
      next();
      parts.push_back(std::move(node));
    }
    if (is_operator(":")) parts.push_back(nullptr);
    else if (!is_operator("]") && !is_operator(",")) parts.push_back(parse_expression(true));
    else parts.push_back(nullptr);
    if (skip_operator(":")) {
      if (!is_operator("]") && !is_operator(",")) parts.push_back(parse_expression(true));
      else parts.push_back(nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto slice = make(Expression::Kind::kSlice, location);
    slice->operands = std::move(parts);
    return slice;
  }

  CallArguments parse_call_arguments() {
    const Location location = current().location;
    expect_operator("(");
    CallArguments arguments;
    bool require_comma = false;
    while (!is_operator(")")) {
      if (require_comma) {
        expect_operator(",");
        if (is_operator(")")) break;
      }
      if (is_operator("*") || is_operator("**"))
        unsupported("'*args' / '**kwargs' in calls", current().location);
      if (current().kind == TokenKind::kName && look().kind == TokenKind::kOperator && look().text == "=") {
        std::string key = next().text;
        next();
        arguments.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!arguments.keyword.empty()) fail("invalid syntax for function call expression", location);
        arguments.positional.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_operator(")");
    return arguments;
  }

  ExpressionPtr parse_call(ExpressionPtr node) {
    auto call = make(Expression::Kind::kCall, current().location);
    call->arguments = parse_call_arguments();
    call->operands.push_back(std::move(node));
    return call;
  }

  ExpressionPtr parse_filter(ExpressionPtr node, bool start_inline) {
    while (is_operator("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const Location location = current().location;
      std::string name = expect_name();
      while (skip_operator(".")) name += "." + expect_name();
      const Support support = filter_support(name);
      if (support == Support::kUnknown) fail("no filter named '" + name + "'", location);
      if (support == Support::kUnsupported) unsupported("the '" + name + "' filter", location);
      auto filter = make(Expression::Kind::kFilter, location);
      filter->name = std::move(name);
      if (is_operator("(")) filter->arguments = parse_call_arguments();
      filter->operands.push_back(std::move(node));
      node = std::move(filter);
    }
    return node;
  }

  ExpressionPtr parse_test(ExpressionPtr node) {
    const Location location = next().location;
    const bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_operator(".")) name += "." + expect_name();
    const Support support = test_support(name);
    if (support == Support::kUnknown) fail("no test named '" + name + "'", location);
    if (support == Support::kUnsupported) unsupported("the '" + name + "' test", location);
    auto test = make(Expression::Kind::kTest, location);
    test->name = std::move(name);
    const TokenKind kind = current().kind;
    if (is_operator("(")) {
      test->arguments = parse_call_arguments();
    } else if ((kind == TokenKind::kName || kind == TokenKind::kString || kind == TokenKind::kInteger ||
                kind == TokenKind::kFloat || is_operator("[") || is_operator("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("you cannot chain multiple tests with is");
      test->arguments.positional.push_back(parse_postfix(parse_primary(false)));
    }
    test->operands.push_back(std::move(node));
    if (!negated) return test;
    auto negation = make(Expression::Kind::kNot, location);
    negation->operands.push_back(std::move(test));
    return negation;
  }

  std::vector<Token> tokens_;
  size_t position_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
  std::vector<std::pair<std::string, Location>> open_tags_;
};

}  // namespace

Body parse(std::string_view source, const LexerOptions& options) {
  return Parser(tokenize(source, options)).parse_template();
}

}  // namespace vt::jinja
