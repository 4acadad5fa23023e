// Jinja tests (`x is defined`, `x is string`, ...), as jinja2/tests.py defines them.
#include <map>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/unicode.h"

namespace vt::jinja {
namespace {

using Test = bool (*)(const Value& value, ArgumentReader& arguments);

Value integer_remainder(const Value& value, const Value& divisor) { return arithmetic("%", value, divisor); }

bool test_defined(const Value& value, ArgumentReader& a) { return a.finish(), !value.is_undefined(); }
bool test_undefined(const Value& value, ArgumentReader& a) { return a.finish(), value.is_undefined(); }
bool test_none(const Value& value, ArgumentReader& a) { return a.finish(), value.is_none(); }
bool test_boolean(const Value& value, ArgumentReader& a) { return a.finish(), value.is_bool(); }
bool test_false(const Value& value, ArgumentReader& a) { return a.finish(), value.is_bool() && !value.as_bool(); }
bool test_true(const Value& value, ArgumentReader& a) { return a.finish(), value.is_bool() && value.as_bool(); }
bool test_integer(const Value& value, ArgumentReader& a) { return a.finish(), value.is_int(); }
bool test_float(const Value& value, ArgumentReader& a) { return a.finish(), value.is_float(); }
bool test_number(const Value& value, ArgumentReader& a) { return a.finish(), value.is_number(); }
bool test_string(const Value& value, ArgumentReader& a) { return a.finish(), value.is_string(); }
bool test_mapping(const Value& value, ArgumentReader& a) { return a.finish(), value.is_object(); }
bool test_callable(const Value& value, ArgumentReader& a) { return a.finish(), value.is_callable(); }
bool test_escaped(const Value& value, ArgumentReader& a) { return a.finish(), value.is_safe(); }

// Sequence: has __len__ and __getitem__ (str, list, tuple, dict, and jinja2's Undefined).
bool test_sequence(const Value& value, ArgumentReader& a) {
  a.finish();
  return value.is_string() || value.is_list_like() || value.is_object() || value.is_undefined();
}

// Iterable: iter() succeeds.
bool test_iterable(const Value& value, ArgumentReader& a) {
  a.finish();
  return value.is_string() || value.is_array() || value.is_object() || value.is_undefined();
}

bool test_odd(const Value& value, ArgumentReader& a) {
  a.finish();
  return equals(integer_remainder(value, Value(2)), Value(1));
}

bool test_even(const Value& value, ArgumentReader& a) {
  a.finish();
  return equals(integer_remainder(value, Value(2)), Value(0));
}

bool test_divisibleby(const Value& value, ArgumentReader& a) {
  const Value divisor = a.take("num");
  a.finish();
  return equals(integer_remainder(value, divisor), Value(0));
}

bool test_lower(const Value& value, ArgumentReader& a) {
  a.finish();
  bool cased = false;
  for (char32_t c : unicode::decode(to_str(value))) {
    if (unicode::is_upper_char(c)) return false;
    cased = cased || unicode::is_lower_char(c);
  }
  return cased;
}

bool test_upper(const Value& value, ArgumentReader& a) {
  a.finish();
  bool cased = false;
  for (char32_t c : unicode::decode(to_str(value))) {
    if (unicode::is_lower_char(c)) return false;
    cased = cased || unicode::is_upper_char(c);
  }
  return cased;
}

// `is` identity: None/True/False are singletons; CPython caches small ints; containers compare by
// address (two equal literals are distinct objects).
bool test_sameas(const Value& value, ArgumentReader& a) {
  const Value other = a.take("other");
  a.finish();
  if (value.kind() != other.kind()) return false;
  switch (value.kind()) {
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return value.as_bool() == other.as_bool();
    case Value::Kind::kInt: return value.as_int() == other.as_int() && value.as_int() >= -5 && value.as_int() <= 256;
    case Value::Kind::kArray: return &value.as_array() == &other.as_array();
    case Value::Kind::kObject:
    case Value::Kind::kNamespace: return &value.as_object() == &other.as_object();
    default: fail_unsupported("'sameas' on " + value.type_name() + " values (identity depends on CPython)");
  }
}

bool test_in(const Value& value, ArgumentReader& a) {
  const Value sequence = a.take("seq");
  a.finish();
  return contains(sequence, value);
}

bool test_filter(const Value& value, ArgumentReader& a) {
  a.finish();
  return value.is_string() && filter_support(value.as_string()) != Support::kUnknown;
}

bool test_test(const Value& value, ArgumentReader& a) {
  a.finish();
  return value.is_string() && test_support(value.as_string()) != Support::kUnknown;
}

Value other_operand(ArgumentReader& a) {
  const Value other = a.take("other");
  a.finish();
  return other;
}
bool test_eq(const Value& value, ArgumentReader& a) { return equals(value, other_operand(a)); }
bool test_ne(const Value& value, ArgumentReader& a) { return !equals(value, other_operand(a)); }
bool test_lt(const Value& value, ArgumentReader& a) { return less_than(value, other_operand(a)); }
bool test_gt(const Value& value, ArgumentReader& a) { return less_than(other_operand(a), value); }
bool test_le(const Value& value, ArgumentReader& a) {
  const Value other = other_operand(a);
  return less_than(value, other) || (less_than(other, value), equals(value, other));
}
bool test_ge(const Value& value, ArgumentReader& a) {
  const Value other = other_operand(a);
  return less_than(other, value) || (less_than(value, other), equals(value, other));
}

const std::map<std::string, Test, std::less<>>& tests() {
  static const std::map<std::string, Test, std::less<>> table = {
      {"defined", test_defined},   {"undefined", test_undefined}, {"none", test_none},
      {"boolean", test_boolean},   {"false", test_false},         {"true", test_true},
      {"integer", test_integer},   {"float", test_float},         {"number", test_number},
      {"string", test_string},     {"mapping", test_mapping},     {"callable", test_callable},
      {"escaped", test_escaped},   {"sequence", test_sequence},   {"iterable", test_iterable},
      {"odd", test_odd},           {"even", test_even},           {"divisibleby", test_divisibleby},
      {"lower", test_lower},       {"upper", test_upper},         {"sameas", test_sameas},
      {"in", test_in},             {"filter", test_filter},       {"test", test_test},
      {"==", test_eq},             {"eq", test_eq},               {"equalto", test_eq},
      {"!=", test_ne},             {"ne", test_ne},               {"<", test_lt},
      {"lt", test_lt},             {"lessthan", test_lt},         {">", test_gt},
      {"gt", test_gt},             {"greaterthan", test_gt},      {"<=", test_le},
      {"le", test_le},             {">=", test_ge},               {"ge", test_ge},
  };
  return table;
}

}  // namespace

Support test_support(std::string_view name) {
  return tests().count(name) ? Support::kSupported : Support::kUnknown;
}

bool apply_test(std::string_view name, const Value& input, Arguments& arguments) {
  const auto found = tests().find(name);
  if (found == tests().end()) fail_render("No test named '" + std::string(name) + "'.");
  ArgumentReader reader(std::string(name), arguments);
  return found->second(input, reader);
}

}  // namespace vt::jinja
