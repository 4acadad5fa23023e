// Python's text forms of values: str(), repr(), float repr and json.dumps, byte-exact, because
// chat templates print them (`{{ x }}`, `| string`, `| tojson`) and the output must match jinja2's.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/error.h"
#include "jinja/unicode.h"
#include "jinja/value.h"

namespace vt::jinja {

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: fixed for -4 < exponent < 16, else scientific.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string text(buffer, result.ptr);
  std::string sign;
  if (text[0] == '-') sign = "-", text.erase(0, 1);
  const size_t e = text.find('e');
  std::string digits = text.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::atoi(text.c_str() + e + 1);
  const int point = exponent + 1;  // digits before the decimal point
  const int count = int(digits.size());
  if (point > -4 && point <= 16) {
    if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
    if (point >= count) return sign + digits + std::string(point - count, '0') + ".0";
    return sign + digits.substr(0, point) + "." + digits.substr(point);
  }
  std::string mantissa = digits.substr(0, 1);
  if (count > 1) mantissa += "." + digits.substr(1);
  char exponent_text[16];
  std::snprintf(exponent_text, sizeof(exponent_text), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return sign + mantissa + exponent_text;
}

std::string string_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : unicode::decode(text)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!unicode::is_printable(c)) {
      char escape[16];
      if (c < 0x100) std::snprintf(escape, sizeof(escape), "\\x%02x", unsigned(c));
      else if (c < 0x10000) std::snprintf(escape, sizeof(escape), "\\u%04x", unsigned(c));
      else std::snprintf(escape, sizeof(escape), "\\U%08x", unsigned(c));
      out += escape;
    } else {
      unicode::append(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

namespace {

// Nesting bound for repr/json: a template can build arbitrarily deep lists in a loop.
constexpr int kMaxDepth = 512;
thread_local int repr_depth = 0;

struct DepthGuard {
  DepthGuard() {
    if (++repr_depth > kMaxDepth) {
      repr_depth = 0;
      fail_unsupported(vt::str("printing values nested more than ", kMaxDepth, " levels deep"));
    }
  }
  ~DepthGuard() { if (repr_depth > 0) --repr_depth; }
};

std::string sequence_repr(const Array& items, const char* open, const char* close, bool tuple) {
  std::string out = open;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += to_repr(items[i]);
  }
  if (tuple && items.size() == 1) out += ",";
  return out + close;
}

std::string object_repr(const Object& object) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, item] : object.entries()) {
    if (!first) out += ", ";
    first = false;
    out += string_repr(key) + ": " + to_repr(item);
  }
  return out + "}";
}

}  // namespace

std::string to_repr(const Value& value) {
  DepthGuard guard;
  switch (value.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return value.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(value.as_int());
    case Value::Kind::kFloat: return float_repr(value.as_double());
    case Value::Kind::kString:
      return value.is_safe() ? "Markup(" + string_repr(value.as_string()) + ")" : string_repr(value.as_string());
    case Value::Kind::kArray:
      switch (value.flavor()) {
        case Value::Flavor::kList: return sequence_repr(value.as_array(), "[", "]", false);
        case Value::Flavor::kTuple: return sequence_repr(value.as_array(), "(", ")", true);
        case Value::Flavor::kGenerator:
          fail_unsupported("printing a generator or iterator (Python prints its memory address); add '| list'");
        default: return value.type_name() + "(" + sequence_repr(value.as_array(), "[", "]", false) + ")";
      }
    case Value::Kind::kObject: return object_repr(value.as_object());
    case Value::Kind::kNamespace: return "<Namespace " + object_repr(value.as_object()) + ">";
    case Value::Kind::kCallable:
      fail_unsupported("printing the function '" + value.as_callable().name +
                       "' (Python prints its memory address)");
  }
  return "";
}

std::string to_str(const Value& value) {
  if (value.is_undefined()) return "";
  if (value.is_string()) return value.as_string();
  return to_repr(value);
}

namespace {

void append_json_string(std::string& out, std::string_view text, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : unicode::decode(text)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    char escape[16];
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c >= 0x10000) {
        const char32_t offset = c - 0x10000;
        std::snprintf(escape, sizeof(escape), "\\u%04x\\u%04x", unsigned(0xD800 + (offset >> 10)),
                      unsigned(0xDC00 + (offset & 0x3FF)));
      } else {
        std::snprintf(escape, sizeof(escape), "\\u%04x", unsigned(c));
      }
      out += escape;
    } else {
      unicode::append(out, c);
    }
  }
  out.push_back('"');
}

struct JsonWriter {
  const JsonOptions& options;
  std::string item_separator, key_separator;
  std::string out;

  void newline(int depth) {
    if (!options.indent) return;
    out.push_back('\n');
    for (int i = 0; i < depth; ++i) out += *options.indent;
  }

  void write(const Value& value, int depth) {
    if (depth > kMaxDepth) fail_unsupported(vt::str("serialising values nested more than ", kMaxDepth, " levels deep"));
    switch (value.kind()) {
      case Value::Kind::kNone: out += "null"; return;
      case Value::Kind::kBool: out += value.as_bool() ? "true" : "false"; return;
      case Value::Kind::kInt: out += std::to_string(value.as_int()); return;
      case Value::Kind::kFloat: {
        const double number = value.as_double();
        if (std::isnan(number)) out += "NaN";
        else if (std::isinf(number)) out += number > 0 ? "Infinity" : "-Infinity";
        else out += float_repr(number);
        return;
      }
      case Value::Kind::kString: append_json_string(out, value.as_string(), options.ensure_ascii); return;
      case Value::Kind::kArray: {
        if (!value.is_list_like()) fail_render("Object of type " + value.type_name() + " is not JSON serializable");
        const Array& items = value.as_array();
        if (items.empty()) return void(out += "[]");
        out.push_back('[');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_separator;
          newline(depth + 1);
          write(items[i], depth + 1);
        }
        newline(depth);
        out.push_back(']');
        return;
      }
      case Value::Kind::kObject: {
        std::vector<const Object::Entry*> entries;
        for (const auto& entry : value.as_object().entries()) entries.push_back(&entry);
        if (entries.empty()) return void(out += "{}");
        if (options.sort_keys)
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto* a, const auto* b) { return a->first < b->first; });
        out.push_back('{');
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) out += item_separator;
          newline(depth + 1);
          append_json_string(out, entries[i]->first, options.ensure_ascii);
          out += key_separator;
          write(entries[i]->second, depth + 1);
        }
        newline(depth);
        out.push_back('}');
        return;
      }
      default:
        fail_render("Object of type " + value.type_name() + " is not JSON serializable");
    }
  }
};

}  // namespace

std::string to_json(const Value& value, const JsonOptions& options) {
  JsonWriter writer{options, options.indent ? "," : ", ", ": ", {}};
  if (options.separators) {
    writer.item_separator = options.separators->first;
    writer.key_separator = options.separators->second;
  }
  writer.write(value, 0);
  return std::move(writer.out);
}

}  // namespace vt::jinja
