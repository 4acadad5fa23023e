// Python operators and lookups as jinja2's sandbox applies them: arithmetic, comparison,
// membership, iteration, attribute/item access (methods first, then items) and slicing.
#include <cmath>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/unicode.h"

namespace vt::jinja {
namespace {

constexpr size_t kMaxSequenceBytes = size_t(1) << 26;  // bound on `*` repetition: 64 MiB

[[noreturn]] void fail_operands(std::string_view op, const Value& left, const Value& right) {
  fail_render(vt::str("unsupported operand type(s) for ", op, ": '", left.type_name(), "' and '",
                      right.type_name(), "'"));
}

// Python integers are unbounded; vt's are 64-bit and refuse to wrap.
int64_t checked_add(int64_t a, int64_t b) {
  int64_t result;
  if (__builtin_add_overflow(a, b, &result)) fail_unsupported("integer arithmetic beyond 64 bits");
  return result;
}
int64_t checked_subtract(int64_t a, int64_t b) {
  int64_t result;
  if (__builtin_sub_overflow(a, b, &result)) fail_unsupported("integer arithmetic beyond 64 bits");
  return result;
}
int64_t checked_multiply(int64_t a, int64_t b) {
  int64_t result;
  if (__builtin_mul_overflow(a, b, &result)) fail_unsupported("integer arithmetic beyond 64 bits");
  return result;
}

Value repeat(const Value& sequence, int64_t count) {
  if (count <= 0) return sequence.is_string() ? Value::string("", sequence.is_safe()) : Value::array({}, sequence.is_tuple());
  if (sequence.is_array() && !sequence.is_list_like()) fail_render("can't multiply sequence of type '" + sequence.type_name() + "'");
  if (sequence.is_string()) {
    const std::string& text = sequence.as_string();
    if (text.size() * uint64_t(count) > kMaxSequenceBytes) fail_unsupported("strings longer than 64 MiB");
    std::string out;
    out.reserve(text.size() * count);
    for (int64_t i = 0; i < count; ++i) out += text;
    return Value::string(std::move(out), sequence.is_safe());
  }
  const Array& items = sequence.as_array();
  if (items.size() * uint64_t(count) > kMaxSequenceBytes / 16) fail_unsupported("lists longer than 4M items");
  Array out;
  for (int64_t i = 0; i < count; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::array(std::move(out), sequence.is_tuple());
}

// CPython's float divmod, so // and % on floats match to the bit.
std::pair<double, double> float_divmod(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floor_div;
  if (div != 0) {
    floor_div = std::floor(div);
    if (div - floor_div > 0.5) floor_div += 1.0;
  } else {
    floor_div = std::copysign(0.0, x / y);
  }
  return {floor_div, mod};
}

Value power(const Value& base, const Value& exponent) {
  if (!base.is_float() && !exponent.is_float() && exponent.as_int() >= 0) {
    int64_t result = 1, factor = base.as_int(), remaining = exponent.as_int();
    while (remaining > 0) {
      if (remaining & 1) result = checked_multiply(result, factor);
      remaining >>= 1;
      if (remaining) factor = checked_multiply(factor, factor);
    }
    return Value(result);
  }
  const double x = base.as_double(), y = exponent.as_double();
  if (x == 0 && y < 0) fail_render("0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y)) fail_unsupported("complex results of ** (negative base, fractional exponent)");
  return Value(std::pow(x, y));
}

}  // namespace

std::string object_type_repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kNone: return "None";
    case Value::Kind::kNamespace: return "jinja2.utils.Namespace object";
    case Value::Kind::kString: return value.is_safe() ? "markupsafe.Markup object" : "str object";
    default: return value.type_name() + " object";
  }
}

Value escape_html(const Value& value) {
  if (value.is_safe()) return value;
  const std::string text = to_str(value);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value::string(std::move(out), true);
}

Value arithmetic(std::string_view op, const Value& left, const Value& right) {
  if (left.is_undefined()) fail_undefined(left);
  if (right.is_undefined()) fail_undefined(right);
  const bool numbers = left.is_number() && right.is_number();
  const bool floats = numbers && (left.is_float() || right.is_float());
  if (op == "+") {
    if (numbers) {
      if (floats) return Value(left.as_double() + right.as_double());
      return Value(checked_add(left.as_int(), right.as_int()));
    }
    if (left.is_string() && right.is_string()) {
      // Markup + str escapes the str (markupsafe's __add__ / __radd__).
      if (left.is_safe() || right.is_safe())
        return Value::string(escape_html(left).as_string() + escape_html(right).as_string(), true);
      return Value(left.as_string() + right.as_string());
    }
    if (left.is_list_like() && right.is_list_like() && left.is_tuple() == right.is_tuple()) {
      Array items = left.as_array();
      items.insert(items.end(), right.as_array().begin(), right.as_array().end());
      return Value::array(std::move(items), left.is_tuple());
    }
    if (left.is_string() && !right.is_string())
      fail_render(vt::str("can only concatenate str (not \"", right.type_name(), "\") to str"));
    fail_operands(op, left, right);
  }
  if (op == "*") {
    if (numbers) {
      if (floats) return Value(left.as_double() * right.as_double());
      return Value(checked_multiply(left.as_int(), right.as_int()));
    }
    if ((left.is_string() || left.is_array()) && right.is_number() && !right.is_float()) return repeat(left, right.as_int());
    if ((right.is_string() || right.is_array()) && left.is_number() && !left.is_float()) return repeat(right, left.as_int());
    fail_operands(op, left, right);
  }
  if (op == "%" && left.is_string()) fail_unsupported("printf-style '%' string formatting");
  if (!numbers) fail_operands(op, left, right);
  if (op == "-") {
    if (floats) return Value(left.as_double() - right.as_double());
    return Value(checked_subtract(left.as_int(), right.as_int()));
  }
  if (op == "/") {
    if (right.as_double() == 0) fail_render("division by zero");
    return Value(left.as_double() / right.as_double());
  }
  if (op == "//" || op == "%") {
    if (floats) {
      if (right.as_double() == 0) fail_render("float floor division or modulo by zero");
      const auto [quotient, remainder] = float_divmod(left.as_double(), right.as_double());
      return Value(op == "//" ? quotient : remainder);
    }
    const int64_t a = left.as_int(), b = right.as_int();
    if (b == 0) fail_render("integer division or modulo by zero");
    if (a == INT64_MIN && b == -1) fail_unsupported("integer arithmetic beyond 64 bits");
    int64_t quotient = a / b, remainder = a % b;
    if (remainder != 0 && ((remainder < 0) != (b < 0))) remainder += b, quotient -= 1;
    return Value(op == "//" ? quotient : remainder);
  }
  if (op == "**") return power(left, right);
  fail_render(vt::str("unknown operator ", op));
}

Value negate(const Value& value) {
  if (value.is_undefined()) fail_undefined(value);
  if (value.is_float()) return Value(-value.as_double());
  if (value.is_number()) {
    if (value.as_int() == INT64_MIN) fail_unsupported("integer arithmetic beyond 64 bits");
    return Value(-value.as_int());
  }
  fail_render("bad operand type for unary -: '" + value.type_name() + "'");
}

bool less_than(const Value& left, const Value& right) {
  if (left.is_undefined()) fail_undefined(left);
  if (right.is_undefined()) fail_undefined(right);
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) return left.as_double() < right.as_double();
    return left.as_int() < right.as_int();
  }
  if (left.is_string() && right.is_string()) return left.as_string() < right.as_string();  // UTF-8 order = code point order
  if (left.is_list_like() && right.is_list_like() && left.is_tuple() == right.is_tuple()) {
    const Array& a = left.as_array();
    const Array& b = right.as_array();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
      if (!equals(a[i], b[i])) return less_than(a[i], b[i]);
    return a.size() < b.size();
  }
  fail_render(vt::str("'<' not supported between instances of '", left.type_name(), "' and '", right.type_name(), "'"));
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::kUndefined: return false;  // Undefined iterates as empty
    case Value::Kind::kString:
      if (!needle.is_string())
        fail_render("'in <string>' requires string as left operand, not " + needle.type_name());
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kArray:
      for (const Value& item : haystack.as_array())
        if (equals(item, needle)) return true;
      return false;
    case Value::Kind::kObject:
      if (needle.is_array() && !needle.is_tuple()) fail_render("unhashable type: 'list'");
      if (needle.is_object()) fail_render("unhashable type: 'dict'");
      return needle.is_string() && haystack.as_object().find(needle.as_string()) != nullptr;
    default:
      fail_render("argument of type '" + haystack.type_name() + "' is not iterable");
  }
}

Array iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kString: {
      Array items;
      for (char32_t c : unicode::decode(value.as_string())) {
        std::string character;
        unicode::append(character, c);
        items.push_back(Value::string(std::move(character), value.is_safe()));
      }
      return items;
    }
    case Value::Kind::kArray: return value.as_array();
    case Value::Kind::kObject: {
      Array keys;
      for (const auto& entry : value.as_object().entries()) keys.push_back(Value(entry.first));
      return keys;
    }
    default: fail_render("'" + value.type_name() + "' object is not iterable");
  }
}

Value get_attribute(const Value& object, std::string_view name) {
  if (object.is_undefined()) fail_undefined(object);
  if (name.size() > 1 && name.substr(0, 2) == "__")
    return Value::undefined(vt::str("access to attribute '", name, "' of '", object.type_name(), "' object is unsafe."));
  if (std::optional<Value> method = find_method(object, name)) return *method;
  if (object.is_object() || object.is_namespace()) {
    if (const Value* entry = object.as_object().find(name)) return *entry;
  }
  if (object.is_number()) {
    static const char* const kNumberAttributes[] = {"real", "imag", "numerator", "denominator", "conjugate",
                                                    "bit_length", "bit_count", "to_bytes", "as_integer_ratio",
                                                    "is_integer", "hex"};
    for (const char* attribute : kNumberAttributes)
      if (name == attribute) fail_unsupported(vt::str("the number attribute '", name, "'"));
  }
  const std::string type = object_type_repr(object);
  return Value::undefined(vt::str("'", type, "' has no attribute '", name, "'"));
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  const bool integer_key = key.is_int() || key.is_bool();
  if (object.is_list_like() && integer_key) {
    const Array& items = object.as_array();
    int64_t index = key.as_int();
    if (index < 0) index += int64_t(items.size());
    if (index >= 0 && index < int64_t(items.size())) return items[size_t(index)];
  } else if (object.is_string() && integer_key) {
    const std::u32string text = unicode::decode(object.as_string());
    int64_t index = key.as_int();
    if (index < 0) index += int64_t(text.size());
    if (index >= 0 && index < int64_t(text.size())) {
      std::string character;
      unicode::append(character, text[size_t(index)]);
      return Value::string(std::move(character), object.is_safe());
    }
  } else if (object.is_object() && key.is_string()) {
    if (const Value* entry = object.as_object().find(key.as_string())) return *entry;
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined(vt::str(object_type_repr(object), " has no element ", to_repr(key)));
}

Value slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_undefined()) fail_undefined(object);
  auto index_or_none = [](const Value& value) {
    return value.is_undefined() || value.is_none() || value.is_int() || value.is_bool();
  };
  if (!(object.is_string() || object.is_list_like()) || !index_or_none(start) || !index_or_none(stop) ||
      !index_or_none(step))
    return Value::undefined(vt::str(object_type_repr(object), " has no element slice"));
  const bool has_start = start.is_int() || start.is_bool();
  const bool has_stop = stop.is_int() || stop.is_bool();
  const int64_t stride = (step.is_int() || step.is_bool()) ? step.as_int() : 1;
  if (stride == 0) fail_render("slice step cannot be zero");
  std::u32string text;
  const bool is_text = object.is_string();
  if (is_text) text = unicode::decode(object.as_string());
  const int64_t length = is_text ? int64_t(text.size()) : int64_t(object.as_array().size());
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](bool given, int64_t value, int64_t fallback) {
    if (!given) return fallback;
    if (value < 0) {
      value += length;
      if (value < 0) value = stride < 0 ? -1 : 0;
    } else if (value >= length) {
      value = stride < 0 ? length - 1 : length;
    }
    return value;
  };
  const int64_t first = adjust(has_start, has_start ? start.as_int() : 0, stride < 0 ? length - 1 : 0);
  const int64_t last = adjust(has_stop, has_stop ? stop.as_int() : 0, stride < 0 ? -1 : length);
  std::u32string text_out;
  Array items_out;
  for (int64_t i = first; stride > 0 ? i < last : i > last; i += stride) {
    if (is_text) text_out.push_back(text[size_t(i)]);
    else items_out.push_back(object.as_array()[size_t(i)]);
  }
  if (is_text) return Value::string(unicode::encode(text_out), object.is_safe());
  return Value::array(std::move(items_out), object.is_tuple());
}

}  // namespace vt::jinja
