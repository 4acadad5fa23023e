// Renders a parsed template: statements write to the output, expressions evaluate to Values.
// Scoping follows jinja2: each for-loop iteration and each macro call gets a fresh frame whose
// assignments vanish with it (hence namespace()); macros see their defining scope, not the caller's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jinja/ast.h"

namespace vt::jinja {

struct Frame {
  explicit Frame(std::shared_ptr<Frame> parent_frame) : parent(std::move(parent_frame)) {}
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);

  std::vector<std::pair<std::string, Value>> variables;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

class Renderer {
 public:
  // `globals`: builtins and the caller's variables, looked up after the template's own.
  explicit Renderer(Object globals);
  ~Renderer();
  std::string render(const Body& body);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow execute(const Body& body, const FramePtr& frame, std::string& out);
  Flow execute(const Statement& statement, const FramePtr& frame, std::string& out);
  Flow execute_for(const Statement& statement, const FramePtr& frame, std::string& out);
  void define_macro(const Statement& statement, const FramePtr& frame);
  Value call_macro(const Statement& statement, const FramePtr& scope, Arguments& arguments);
  void assign(const Expression& target, const Value& value, const FramePtr& frame);

  Value evaluate(const Expression& expression, const FramePtr& frame);
  Value evaluate_inner(const Expression& expression, const FramePtr& frame);
  Arguments evaluate_arguments(const CallArguments& arguments, const FramePtr& frame);
  Value apply_filters(const Expression& filter, const Value& input, const FramePtr& frame);
  bool compare(const std::string& op, const Value& left, const Value& right);

  void count_step();

  FramePtr globals_;
  std::vector<FramePtr> macro_scopes_;  // cleared after rendering: macros and their scopes form cycles
  int call_depth_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace vt::jinja
