// Tree-walking renderer for vt's Jinja engine.
#include "jinja/renderer.h"

#include "jinja/builtins.h"
#include "jinja/unicode.h"

namespace vt::jinja {
namespace {

// Bounds that keep a hostile template from hanging or exhausting the process (the sandbox's job).
constexpr int kMaxCallDepth = 200;
constexpr uint64_t kMaxSteps = 2'000'000;
constexpr size_t kMaxOutputBytes = size_t(1) << 26;

}  // namespace

const Value* Frame::find(std::string_view name) const {
  for (const Frame* frame = this; frame; frame = frame->parent.get())
    for (const auto& [key, value] : frame->variables)
      if (key == name) return &value;
  return nullptr;
}

void Frame::set(const std::string& name, Value value) {
  for (auto& [key, existing] : variables) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  variables.emplace_back(name, std::move(value));
}

Renderer::Renderer(Object globals) : globals_(std::make_shared<Frame>(nullptr)) {
  for (const auto& [name, value] : globals.entries()) globals_->set(name, value);
}

Renderer::~Renderer() {
  for (const FramePtr& frame : macro_scopes_) frame->variables.clear();
}

std::string Renderer::render(const Body& body) {
  auto root = std::make_shared<Frame>(globals_);
  std::string out;
  execute(body, root, out);
  return out;
}

void Renderer::count_step() {
  if (++steps_ > kMaxSteps) fail_unsupported("templates running more than 2M steps (loop iterations and statements)");
}

Renderer::Flow Renderer::execute(const Body& body, const FramePtr& frame, std::string& out) {
  for (const auto& statement : body) {
    const Flow flow = execute(*statement, frame, out);
    if (flow != Flow::kNormal) return flow;
    if (out.size() > kMaxOutputBytes) fail_unsupported("output longer than 64 MiB");
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::execute(const Statement& statement, const FramePtr& frame, std::string& out) {
  count_step();
  try {
    switch (statement.kind) {
      case Statement::Kind::kText: out += statement.text; return Flow::kNormal;
      case Statement::Kind::kOutput: out += to_str(evaluate(*statement.expression, frame)); return Flow::kNormal;
      case Statement::Kind::kIf:
        for (const auto& [condition, body] : statement.branches)
          if (evaluate(*condition, frame).truthy()) return execute(body, frame, out);
        return execute(statement.else_body, frame, out);
      case Statement::Kind::kFor: return execute_for(statement, frame, out);
      case Statement::Kind::kSet: assign(*statement.target, evaluate(*statement.expression, frame), frame); return Flow::kNormal;
      case Statement::Kind::kSetBlock: {
        std::string text;
        execute(statement.body, frame, text);
        Value value(std::move(text));
        if (statement.expression) value = apply_filters(*statement.expression, value, frame);
        assign(*statement.target, value, frame);
        return Flow::kNormal;
      }
      case Statement::Kind::kMacro: define_macro(statement, frame); return Flow::kNormal;
      case Statement::Kind::kFilterBlock: {
        std::string text;
        execute(statement.body, std::make_shared<Frame>(frame), text);
        out += to_str(apply_filters(*statement.expression, Value(std::move(text)), frame));
        return Flow::kNormal;
      }
      case Statement::Kind::kWith: {
        auto scope = std::make_shared<Frame>(frame);
        for (const auto& [target, value] : statement.assignments) assign(*target, evaluate(*value, frame), scope);
        return execute(statement.body, scope, out);
      }
      case Statement::Kind::kScope: execute(statement.body, std::make_shared<Frame>(frame), out); return Flow::kNormal;
      case Statement::Kind::kBreak: return Flow::kBreak;
      case Statement::Kind::kContinue: return Flow::kContinue;
    }
  } catch (const TemplateError& error) {
    if (error.location().line == 0) throw error.at(statement.location);
    throw;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::execute_for(const Statement& statement, const FramePtr& frame, std::string& out) {
  const Value iterable = evaluate(*statement.expression, frame);
  Array items = iterate(iterable);
  if (statement.condition) {
    Array kept;
    for (const Value& item : items) {
      auto scope = std::make_shared<Frame>(frame);
      assign(*statement.target, item, scope);
      if (evaluate(*statement.condition, scope).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t length = int64_t(items.size());
  for (int64_t index = 0; index < length; ++index) {
    count_step();
    auto scope = std::make_shared<Frame>(frame);
    assign(*statement.target, items[size_t(index)], scope);
    Object loop;
    loop.set("index0", Value(index));
    loop.set("index", Value(index + 1));
    loop.set("revindex0", Value(length - index - 1));
    loop.set("revindex", Value(length - index));
    loop.set("first", Value(index == 0));
    loop.set("last", Value(index == length - 1));
    loop.set("length", Value(length));
    loop.set("depth0", Value(0));
    loop.set("depth", Value(1));
    loop.set("previtem", index > 0 ? items[size_t(index - 1)] : Value::undefined("there is no previous item"));
    loop.set("nextitem", index + 1 < length ? items[size_t(index + 1)] : Value::undefined("there is no next item"));
    loop.set("cycle", Value::callable("loop.cycle", [index](Arguments& arguments) {
      if (arguments.positional.empty()) fail_render("no items for cycling given");
      return arguments.positional[size_t(index) % arguments.positional.size()];
    }));
    scope->set("loop", Value::object(std::move(loop)));
    const Flow flow = execute(statement.body, scope, out);
    if (flow == Flow::kBreak) break;
  }
  if (length == 0) return execute(statement.else_body, std::make_shared<Frame>(frame), out);
  return Flow::kNormal;
}

void Renderer::define_macro(const Statement& statement, const FramePtr& frame) {
  // The frame holds the macro and the macro holds the frame: ~Renderer breaks that cycle.
  macro_scopes_.push_back(frame);
  const Statement* macro = &statement;
  frame->set(statement.name, Value::callable(statement.name, [this, macro, frame](Arguments& arguments) {
    return call_macro(*macro, frame, arguments);
  }));
}

Value Renderer::call_macro(const Statement& macro, const FramePtr& scope, Arguments& arguments) {
  if (++call_depth_ > kMaxCallDepth) {
    --call_depth_;
    fail_render(vt::str("macro calls nested deeper than ", kMaxCallDepth));
  }
  struct DepthGuard {
    int& depth;
    ~DepthGuard() { --depth; }
  } guard{call_depth_};
  auto frame = std::make_shared<Frame>(scope);
  const size_t count = macro.parameters.size();
  if (arguments.positional.size() > count && !macro.uses_varargs)
    fail_render(vt::str("macro '", macro.name, "' takes not more than ", count, " argument(s)"));
  std::vector<bool> given(count, false);
  for (size_t i = 0; i < arguments.positional.size() && i < count; ++i) {
    frame->set(macro.parameters[i], arguments.positional[i]);
    given[i] = true;
  }
  Object extra_keywords;
  for (auto& [key, value] : arguments.keyword) {
    size_t i = 0;
    while (i < count && macro.parameters[i] != key) ++i;
    if (i == count) {
      if (!macro.uses_kwargs) fail_render(vt::str("macro '", macro.name, "' takes no keyword argument '", key, "'"));
      extra_keywords.set(key, value);
      continue;
    }
    if (given[i]) fail_render(vt::str("macro '", macro.name, "' got multiple values for argument '", key, "'"));
    frame->set(key, value);
    given[i] = true;
  }
  const size_t first_default = count - macro.defaults.size();
  for (size_t i = 0; i < count; ++i) {
    if (given[i]) continue;
    if (i >= first_default) frame->set(macro.parameters[i], evaluate(*macro.defaults[i - first_default], frame));
    else frame->set(macro.parameters[i], Value::undefined(vt::str("parameter '", macro.parameters[i], "' was not provided")));
  }
  if (macro.uses_varargs) {
    Array rest;
    for (size_t i = count; i < arguments.positional.size(); ++i) rest.push_back(arguments.positional[i]);
    frame->set("varargs", Value::array(std::move(rest), true));
  }
  if (macro.uses_kwargs) frame->set("kwargs", Value::object(std::move(extra_keywords)));
  std::string out;
  execute(macro.body, frame, out);
  return Value(std::move(out));
}

void Renderer::assign(const Expression& target, const Value& value, const FramePtr& frame) {
  if (target.kind == Expression::Kind::kName) return frame->set(target.name, value);
  if (target.kind == Expression::Kind::kNamespaceRef) {
    const Value* object = frame->find(target.name);
    if (!object || !object->is_namespace())
      throw TemplateError(TemplateError::Kind::kRender, "cannot assign attribute on non-namespace object", target.location);
    object->namespace_attributes().set(target.attribute, value);
    return;
  }
  // Tuple unpacking, as Python's.
  const Array items = iterate(value);
  const size_t wanted = target.operands.size();
  if (items.size() < wanted)
    fail_render(vt::str("not enough values to unpack (expected ", wanted, ", got ", items.size(), ")"));
  if (items.size() > wanted) fail_render(vt::str("too many values to unpack (expected ", wanted, ")"));
  for (size_t i = 0; i < wanted; ++i) assign(*target.operands[i], items[i], frame);
}

Arguments Renderer::evaluate_arguments(const CallArguments& arguments, const FramePtr& frame) {
  Arguments values;
  for (const auto& argument : arguments.positional) values.positional.push_back(evaluate(*argument, frame));
  for (const auto& [key, argument] : arguments.keyword) values.keyword.emplace_back(key, evaluate(*argument, frame));
  return values;
}

// A filter chain whose innermost input is null (filter blocks, `set x | f`) applied to `input`.
Value Renderer::apply_filters(const Expression& filter, const Value& input, const FramePtr& frame) {
  const Expression* inner = filter.operands.empty() ? nullptr : filter.operands[0].get();
  const Value value = inner ? apply_filters(*inner, input, frame) : input;
  Arguments arguments = evaluate_arguments(filter.arguments, frame);
  return apply_filter(filter.name, value, arguments);
}

bool Renderer::compare(const std::string& op, const Value& left, const Value& right) {
  if (op == "==") return equals(left, right);
  if (op == "!=") return !equals(left, right);
  if (op == "<") return less_than(left, right);
  if (op == ">") return less_than(right, left);
  if (op == "<=") return equals(left, right) ? (less_than(left, right), true) : less_than(left, right);
  if (op == ">=") return equals(left, right) ? (less_than(right, left), true) : less_than(right, left);
  if (op == "in") return contains(right, left);
  return !contains(right, left);  // not in
}

Value Renderer::evaluate(const Expression& expression, const FramePtr& frame) {
  try {
    return evaluate_inner(expression, frame);
  } catch (const TemplateError& error) {
    if (error.location().line == 0) throw error.at(expression.location);
    throw;
  }
}

Value Renderer::evaluate_inner(const Expression& expression, const FramePtr& frame) {
  const auto& operands = expression.operands;
  switch (expression.kind) {
    case Expression::Kind::kConstant: return expression.constant;
    case Expression::Kind::kName: {
      if (const Value* value = frame->find(expression.name)) return *value;
      return Value::undefined("'" + expression.name + "' is undefined");
    }
    case Expression::Kind::kNamespaceRef: fail_render("namespace reference outside an assignment");
    case Expression::Kind::kList:
    case Expression::Kind::kTuple: {
      Array items;
      for (const auto& operand : operands) items.push_back(evaluate(*operand, frame));
      return Value::array(std::move(items), expression.kind == Expression::Kind::kTuple);
    }
    case Expression::Kind::kDict: {
      Object entries;
      for (size_t i = 0; i + 1 < operands.size(); i += 2) {
        const Value key = evaluate(*operands[i], frame);
        if (!key.is_string()) fail_unsupported("dict keys that are not strings");
        entries.set(key.as_string(), evaluate(*operands[i + 1], frame));
      }
      return Value::object(std::move(entries));
    }
    case Expression::Kind::kAttribute: return get_attribute(evaluate(*operands[0], frame), expression.name);
    case Expression::Kind::kItem: {
      const Value object = evaluate(*operands[0], frame);
      const Expression& key = *operands[1];
      if (key.kind == Expression::Kind::kSlice) {
        auto part = [&](size_t i) { return key.operands[i] ? evaluate(*key.operands[i], frame) : Value::none(); };
        return slice(object, part(0), part(1), part(2));
      }
      return get_item(object, evaluate(key, frame));
    }
    case Expression::Kind::kSlice: fail_render("slice outside a subscript");
    case Expression::Kind::kCall: {
      const Value callee = evaluate(*operands[0], frame);
      if (callee.is_undefined()) fail_undefined(callee);
      if (!callee.is_callable()) fail_render("'" + callee.type_name() + "' object is not callable");
      Arguments arguments = evaluate_arguments(expression.arguments, frame);
      return callee.as_callable().function(arguments);
    }
    case Expression::Kind::kFilter: {
      const Value input = evaluate(*operands[0], frame);
      Arguments arguments = evaluate_arguments(expression.arguments, frame);
      return apply_filter(expression.name, input, arguments);
    }
    case Expression::Kind::kTest: {
      const Value input = evaluate(*operands[0], frame);
      Arguments arguments = evaluate_arguments(expression.arguments, frame);
      return Value(apply_test(expression.name, input, arguments));
    }
    case Expression::Kind::kNot: return Value(!evaluate(*operands[0], frame).truthy());
    case Expression::Kind::kNegate: return negate(evaluate(*operands[0], frame));
    case Expression::Kind::kPositive: {
      const Value value = evaluate(*operands[0], frame);
      if (value.is_undefined()) fail_undefined(value);
      if (!value.is_number()) fail_render("bad operand type for unary +: '" + value.type_name() + "'");
      return value.is_bool() ? Value(value.as_int()) : value;
    }
    case Expression::Kind::kBinary:
      return arithmetic(expression.name, evaluate(*operands[0], frame), evaluate(*operands[1], frame));
    case Expression::Kind::kAnd: {
      Value left = evaluate(*operands[0], frame);
      return left.truthy() ? evaluate(*operands[1], frame) : left;
    }
    case Expression::Kind::kOr: {
      Value left = evaluate(*operands[0], frame);
      return left.truthy() ? left : evaluate(*operands[1], frame);
    }
    case Expression::Kind::kCompare: {
      Value left = evaluate(*operands[0], frame);
      for (size_t i = 0; i < expression.operators.size(); ++i) {
        Value right = evaluate(*operands[i + 1], frame);
        if (!compare(expression.operators[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case Expression::Kind::kConcat: {
      std::string text;
      for (const auto& operand : operands) text += to_str(evaluate(*operand, frame));
      return Value(std::move(text));
    }
    case Expression::Kind::kConditional: {
      if (evaluate(*operands[1], frame).truthy()) return evaluate(*operands[0], frame);
      if (operands[2]) return evaluate(*operands[2], frame);
      return Value::undefined(vt::str("the inline if-expression on line ", expression.location.line,
                                      " evaluated to false and no else section was defined."));
    }
  }
  fail_render("unknown expression");
}

}  // namespace vt::jinja
