// Methods of str, list/tuple and dict reachable from templates (`s.startswith(...)`,
// `d.items()`), with Python's semantics. Mutating methods are "unsafe" as in jinja2's
// ImmutableSandboxedEnvironment: the lookup yields an Undefined that fails when called.
#include <algorithm>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/unicode.h"

namespace vt::jinja {
namespace {

using Method = Value (*)(const Value& receiver, ArgumentReader& arguments);

std::string string_argument(const Value& value, const char* method) {
  if (!value.is_string())
    fail_render(vt::str(method, "() argument must be str, not ", value.type_name()));
  return value.as_string();
}

// Markup receivers escape their string arguments and return Markup (markupsafe's wrappers).
std::string argument_for(const Value& receiver, const Value& value, const char* method) {
  if (receiver.is_safe() && value.is_string()) return escape_html(value).as_string();
  return string_argument(value, method);
}

Value result_for(const Value& receiver, std::string text) { return Value::string(std::move(text), receiver.is_safe()); }

size_t code_point_index(std::string_view text, size_t byte_offset) { return unicode::length(text.substr(0, byte_offset)); }

Value str_startswith_impl(const Value& receiver, ArgumentReader& a, bool ends) {
  const Value affix = a.take("prefix");
  if (a.has("start") || !a.take("start").is_undefined()) fail_unsupported("start/end arguments of str.startswith/endswith");
  a.finish();
  const std::string& text = receiver.as_string();
  auto matches = [&](const Value& candidate) {
    const std::string part = string_argument(candidate, ends ? "endswith" : "startswith");
    if (part.size() > text.size()) return false;
    return ends ? text.compare(text.size() - part.size(), part.size(), part) == 0 : text.compare(0, part.size(), part) == 0;
  };
  if (affix.is_tuple()) return Value(std::any_of(affix.as_array().begin(), affix.as_array().end(), matches));
  if (!affix.is_string())
    fail_render(vt::str(ends ? "endswith" : "startswith", " first arg must be str or a tuple of str, not ", affix.type_name()));
  return Value(matches(affix));
}
Value str_startswith(const Value& r, ArgumentReader& a) { return str_startswith_impl(r, a, false); }
Value str_endswith(const Value& r, ArgumentReader& a) { return str_startswith_impl(r, a, true); }

Value strip_impl(const Value& receiver, ArgumentReader& a, bool left, bool right) {
  const Value chars = a.take("chars", Value::none());
  a.finish();
  if (chars.is_none()) return result_for(receiver, unicode::strip(receiver.as_string(), left, right));
  const std::u32string set = unicode::decode(argument_for(receiver, chars, "strip"));
  return result_for(receiver, unicode::strip(receiver.as_string(), left, right, &set));
}
Value str_strip(const Value& r, ArgumentReader& a) { return strip_impl(r, a, true, true); }
Value str_lstrip(const Value& r, ArgumentReader& a) { return strip_impl(r, a, true, false); }
Value str_rstrip(const Value& r, ArgumentReader& a) { return strip_impl(r, a, false, true); }

Array split_impl(const Value& receiver, const Value& separator, int64_t limit, bool from_right) {
  Array parts;
  if (separator.is_none()) {
    // Runs of whitespace separate; empty ends are dropped; the unsplit rest keeps its far-side space.
    std::u32string text = unicode::decode(receiver.as_string());
    if (from_right) std::reverse(text.begin(), text.end());
    size_t i = 0;
    std::vector<std::u32string> pieces;
    while (true) {
      while (i < text.size() && unicode::is_space(text[i])) ++i;
      if (i >= text.size()) break;
      if (limit >= 0 && int64_t(pieces.size()) == limit) {
        std::u32string rest = text.substr(i);
        pieces.push_back(rest);
        break;
      }
      size_t end = i;
      while (end < text.size() && !unicode::is_space(text[end])) ++end;
      pieces.push_back(text.substr(i, end - i));
      i = end;
    }
    if (from_right) {
      std::reverse(pieces.begin(), pieces.end());
      for (auto& piece : pieces) std::reverse(piece.begin(), piece.end());
    }
    for (const auto& piece : pieces) parts.push_back(result_for(receiver, unicode::encode(piece)));
    return parts;
  }
  const std::string sep = argument_for(receiver, separator, "split");
  if (sep.empty()) fail_render("empty separator");
  const std::string& text = receiver.as_string();
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t start = 0;
    while (limit < 0 || int64_t(pieces.size()) < limit) {
      const size_t found = text.find(sep, start);
      if (found == std::string::npos) break;
      pieces.push_back(text.substr(start, found - start));
      start = found + sep.size();
    }
    pieces.push_back(text.substr(start));
  } else {
    size_t end = text.size();
    while (limit < 0 || int64_t(pieces.size()) < limit) {
      if (end < sep.size()) break;
      const size_t found = text.rfind(sep, end - sep.size());
      if (found == std::string::npos) break;
      pieces.push_back(text.substr(found + sep.size(), end - found - sep.size()));
      end = found;
    }
    pieces.push_back(text.substr(0, end));
    std::reverse(pieces.begin(), pieces.end());
  }
  for (auto& piece : pieces) parts.push_back(result_for(receiver, std::move(piece)));
  return parts;
}

Value split_method(const Value& receiver, ArgumentReader& a, bool from_right) {
  const Value separator = a.take("sep", Value::none());
  const Value limit = a.take("maxsplit", Value(-1));
  a.finish();
  if (!limit.is_int() && !limit.is_bool()) fail_render("maxsplit must be an integer");
  return Value::array(split_impl(receiver, separator, limit.as_int(), from_right));
}
Value str_split(const Value& r, ArgumentReader& a) { return split_method(r, a, false); }
Value str_rsplit(const Value& r, ArgumentReader& a) { return split_method(r, a, true); }

Value str_splitlines(const Value& receiver, ArgumentReader& a) {
  const bool keep_ends = a.take("keepends", Value(false)).truthy();
  a.finish();
  const std::u32string text = unicode::decode(receiver.as_string());
  Array lines;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const bool breaks = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                        c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!breaks) continue;
    size_t end = i + 1;
    if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++end;
    lines.push_back(result_for(receiver, unicode::encode(text.substr(start, (keep_ends ? end : i) - start))));
    start = end;
    i = end - 1;
  }
  if (start < text.size()) lines.push_back(result_for(receiver, unicode::encode(text.substr(start))));
  return Value::array(std::move(lines));
}

Value str_replace(const Value& receiver, ArgumentReader& a) {
  const std::string old_text = argument_for(receiver, a.take("old"), "replace");
  const std::string new_text = argument_for(receiver, a.take("new"), "replace");
  const Value count_value = a.take("count", Value(-1));
  a.finish();
  int64_t count = count_value.as_int();
  const std::string& text = receiver.as_string();
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` before every character and at the end.
    const std::u32string points = unicode::decode(text);
    for (size_t i = 0; i <= points.size(); ++i) {
      if (count != 0) out += new_text, --count;
      if (i < points.size()) unicode::append(out, points[i]);
    }
    return result_for(receiver, std::move(out));
  }
  size_t start = 0;
  while (count != 0) {
    const size_t found = text.find(old_text, start);
    if (found == std::string::npos) break;
    out += text.substr(start, found - start) + new_text;
    start = found + old_text.size();
    --count;
  }
  out += text.substr(start);
  return result_for(receiver, std::move(out));
}

Value str_upper(const Value& r, ArgumentReader& a) { return a.finish(), result_for(r, unicode::upper(r.as_string())); }
Value str_lower(const Value& r, ArgumentReader& a) { return a.finish(), result_for(r, unicode::lower(r.as_string())); }
Value str_title(const Value& r, ArgumentReader& a) { return a.finish(), result_for(r, unicode::title(r.as_string())); }
Value str_capitalize(const Value& r, ArgumentReader& a) { return a.finish(), result_for(r, unicode::capitalize(r.as_string())); }
Value str_swapcase(const Value& r, ArgumentReader& a) { return a.finish(), result_for(r, unicode::swapcase(r.as_string())); }

Value find_impl(const Value& receiver, ArgumentReader& a, bool from_right, bool raise) {
  const std::string needle = string_argument(a.take("sub"), "find");
  if (!a.take("start").is_undefined()) fail_unsupported("start/end arguments of str.find/index");
  a.finish();
  const std::string& text = receiver.as_string();
  const size_t found = from_right ? text.rfind(needle) : text.find(needle);
  if (found == std::string::npos) {
    if (raise) fail_render("substring not found");
    return Value(-1);
  }
  return Value(int64_t(code_point_index(text, found)));
}
Value str_find(const Value& r, ArgumentReader& a) { return find_impl(r, a, false, false); }
Value str_rfind(const Value& r, ArgumentReader& a) { return find_impl(r, a, true, false); }
Value str_index(const Value& r, ArgumentReader& a) { return find_impl(r, a, false, true); }
Value str_rindex(const Value& r, ArgumentReader& a) { return find_impl(r, a, true, true); }

Value str_count(const Value& receiver, ArgumentReader& a) {
  const std::string needle = string_argument(a.take("sub"), "count");
  a.finish();
  const std::string& text = receiver.as_string();
  if (needle.empty()) return Value(int64_t(unicode::length(text) + 1));
  int64_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++count;
  return Value(count);
}

Value str_join(const Value& receiver, ArgumentReader& a) {
  const Value items = a.take("iterable");
  a.finish();
  std::string out;
  bool first = true;
  for (const Value& item : iterate(items)) {
    if (!item.is_string()) fail_render("sequence item: expected str instance, " + item.type_name() + " found");
    if (!first) out += receiver.as_string();
    first = false;
    out += argument_for(receiver, item, "join");
  }
  return result_for(receiver, std::move(out));
}

Value pad_impl(const Value& receiver, ArgumentReader& a, char side) {
  const Value width = a.take("width");
  const Value fill = a.take("fillchar", Value(" "));
  a.finish();
  if (!width.is_int()) fail_render("width must be an integer");
  const std::u32string fill_points = unicode::decode(string_argument(fill, "pad"));
  if (fill_points.size() != 1) fail_render("The fill character must be exactly one character long");
  const std::u32string text = unicode::decode(receiver.as_string());
  const int64_t margin = width.as_int() - int64_t(text.size());
  if (margin <= 0) return receiver;
  int64_t left = side == 'l' ? 0 : side == 'r' ? margin : margin / 2 + (margin & width.as_int() & 1);
  std::u32string out(size_t(left), fill_points[0]);
  out += text;
  out += std::u32string(size_t(margin - left), fill_points[0]);
  return result_for(receiver, unicode::encode(out));
}
Value str_ljust(const Value& r, ArgumentReader& a) { return pad_impl(r, a, 'l'); }
Value str_rjust(const Value& r, ArgumentReader& a) { return pad_impl(r, a, 'r'); }
Value str_center(const Value& r, ArgumentReader& a) { return pad_impl(r, a, 'c'); }

Value str_zfill(const Value& receiver, ArgumentReader& a) {
  const Value width = a.take("width");
  a.finish();
  std::u32string text = unicode::decode(receiver.as_string());
  const int64_t fill = width.as_int() - int64_t(text.size());
  if (fill <= 0) return receiver;
  const size_t at = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  text.insert(at, std::u32string(size_t(fill), '0'));
  return result_for(receiver, unicode::encode(text));
}

Value partition_impl(const Value& receiver, ArgumentReader& a, bool from_right) {
  const std::string separator = argument_for(receiver, a.take("sep"), "partition");
  a.finish();
  if (separator.empty()) fail_render("empty separator");
  const std::string& text = receiver.as_string();
  const size_t found = from_right ? text.rfind(separator) : text.find(separator);
  if (found == std::string::npos) {
    return from_right ? Value::array({result_for(receiver, ""), result_for(receiver, ""), receiver}, true)
                      : Value::array({receiver, result_for(receiver, ""), result_for(receiver, "")}, true);
  }
  return Value::array({result_for(receiver, text.substr(0, found)), result_for(receiver, separator),
                       result_for(receiver, text.substr(found + separator.size()))}, true);
}
Value str_partition(const Value& r, ArgumentReader& a) { return partition_impl(r, a, false); }
Value str_rpartition(const Value& r, ArgumentReader& a) { return partition_impl(r, a, true); }

Value str_removeprefix(const Value& receiver, ArgumentReader& a) {
  const std::string prefix = argument_for(receiver, a.take("prefix"), "removeprefix");
  a.finish();
  const std::string& text = receiver.as_string();
  return text.compare(0, prefix.size(), prefix) == 0 ? result_for(receiver, text.substr(prefix.size())) : receiver;
}

Value str_removesuffix(const Value& receiver, ArgumentReader& a) {
  const std::string suffix = argument_for(receiver, a.take("suffix"), "removesuffix");
  a.finish();
  const std::string& text = receiver.as_string();
  if (suffix.empty() || suffix.size() > text.size() || text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0)
    return receiver;
  return result_for(receiver, text.substr(0, text.size() - suffix.size()));
}

// Character-class predicates; vt answers them for ASCII text and refuses other text.
Value class_impl(const Value& receiver, ArgumentReader& a, int (*predicate)(int), const char* name) {
  a.finish();
  const std::string& text = receiver.as_string();
  if (text.empty()) return Value(false);
  for (unsigned char c : text) {
    if (c >= 0x80) fail_unsupported(vt::str("str.", name, "() on non-ASCII text"));
    if (!predicate(c)) return Value(false);
  }
  return Value(true);
}
Value str_isdigit(const Value& r, ArgumentReader& a) { return class_impl(r, a, [](int c) { return int(c >= '0' && c <= '9'); }, "isdigit"); }
Value str_isalpha(const Value& r, ArgumentReader& a) { return class_impl(r, a, [](int c) { return int(std::isalpha(c) != 0); }, "isalpha"); }
Value str_isalnum(const Value& r, ArgumentReader& a) { return class_impl(r, a, [](int c) { return int(std::isalnum(c) != 0); }, "isalnum"); }

Value str_isspace(const Value& receiver, ArgumentReader& a) {
  a.finish();
  const std::u32string text = unicode::decode(receiver.as_string());
  return Value(!text.empty() && std::all_of(text.begin(), text.end(), unicode::is_space));
}

Value str_islower(const Value& receiver, ArgumentReader& a) {
  a.finish();
  bool cased = false;
  for (char32_t c : unicode::decode(receiver.as_string())) {
    if (unicode::is_upper_char(c)) return Value(false);
    cased = cased || unicode::is_lower_char(c);
  }
  return Value(cased);
}

Value str_isupper(const Value& receiver, ArgumentReader& a) {
  a.finish();
  bool cased = false;
  for (char32_t c : unicode::decode(receiver.as_string())) {
    if (unicode::is_lower_char(c)) return Value(false);
    cased = cased || unicode::is_upper_char(c);
  }
  return Value(cased);
}

Value sequence_index(const Value& receiver, ArgumentReader& a) {
  const Value needle = a.take("value");
  a.finish();
  const Array& items = receiver.as_array();
  for (size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], needle)) return Value(int64_t(i));
  fail_render(to_repr(needle) + " is not in list");
}

Value sequence_count(const Value& receiver, ArgumentReader& a) {
  const Value needle = a.take("value");
  a.finish();
  const Array& items = receiver.as_array();
  return Value(int64_t(std::count_if(items.begin(), items.end(), [&](const Value& item) { return equals(item, needle); })));
}

Value sequence_copy(const Value& receiver, ArgumentReader& a) { return a.finish(), Value::array(receiver.as_array()); }

Value dict_items(const Value& receiver, ArgumentReader& a) {
  a.finish();
  Array pairs;
  for (const auto& [key, value] : receiver.as_object().entries()) pairs.push_back(Value::array({Value(key), value}, true));
  return Value::sequence(std::move(pairs), Value::Flavor::kDictItems);
}

Value dict_keys(const Value& receiver, ArgumentReader& a) {
  a.finish();
  Array keys;
  for (const auto& entry : receiver.as_object().entries()) keys.push_back(Value(entry.first));
  return Value::sequence(std::move(keys), Value::Flavor::kDictKeys);
}

Value dict_values(const Value& receiver, ArgumentReader& a) {
  a.finish();
  Array values;
  for (const auto& entry : receiver.as_object().entries()) values.push_back(entry.second);
  return Value::sequence(std::move(values), Value::Flavor::kDictValues);
}

Value dict_get(const Value& receiver, ArgumentReader& a) {
  const Value key = a.take("key");
  const Value fallback = a.take("default", Value::none());
  a.finish();
  if (key.is_array() && !key.is_tuple()) fail_render("unhashable type: 'list'");
  if (key.is_object()) fail_render("unhashable type: 'dict'");
  if (!key.is_string()) return fallback;
  const Value* found = receiver.as_object().find(key.as_string());
  return found ? *found : fallback;
}

Value dict_copy(const Value& receiver, ArgumentReader& a) { return a.finish(), Value::object(receiver.as_object()); }

struct MethodTable {
  std::vector<std::pair<const char*, Method>> supported;
  std::vector<const char*> unsafe;       // mutate the receiver: refused by the immutable sandbox
  std::vector<const char*> unsupported;  // exist in Python, not in vt
};

const MethodTable& string_methods() {
  static const MethodTable table{
      {{"startswith", str_startswith}, {"endswith", str_endswith}, {"strip", str_strip}, {"lstrip", str_lstrip},
       {"rstrip", str_rstrip}, {"split", str_split}, {"rsplit", str_rsplit}, {"splitlines", str_splitlines},
       {"replace", str_replace}, {"upper", str_upper}, {"lower", str_lower}, {"title", str_title},
       {"capitalize", str_capitalize}, {"swapcase", str_swapcase}, {"find", str_find}, {"rfind", str_rfind},
       {"index", str_index}, {"rindex", str_rindex}, {"count", str_count}, {"join", str_join},
       {"ljust", str_ljust}, {"rjust", str_rjust}, {"center", str_center}, {"zfill", str_zfill},
       {"partition", str_partition}, {"rpartition", str_rpartition}, {"removeprefix", str_removeprefix},
       {"removesuffix", str_removesuffix}, {"isdigit", str_isdigit}, {"isalpha", str_isalpha},
       {"isalnum", str_isalnum}, {"isspace", str_isspace}, {"islower", str_islower}, {"isupper", str_isupper}},
      {},
      {"format", "format_map", "encode", "expandtabs", "translate", "maketrans", "casefold", "isdecimal",
       "isnumeric", "isidentifier", "istitle", "isprintable", "isascii", "escape", "unescape", "striptags"}};
  return table;
}

const MethodTable& list_methods() {
  static const MethodTable table{{{"index", sequence_index}, {"count", sequence_count}, {"copy", sequence_copy}},
                                 {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"},
                                 {}};
  return table;
}

const MethodTable& tuple_methods() {
  static const MethodTable table{{{"index", sequence_index}, {"count", sequence_count}}, {}, {}};
  return table;
}

const MethodTable& dict_methods() {
  static const MethodTable table{{{"items", dict_items}, {"keys", dict_keys}, {"values", dict_values},
                                  {"get", dict_get}, {"copy", dict_copy}},
                                 {"pop", "popitem", "setdefault", "update", "clear"},
                                 {"fromkeys"}};
  return table;
}

}  // namespace

std::optional<Value> find_method(const Value& receiver, std::string_view name) {
  const MethodTable* table = nullptr;
  if (receiver.is_string()) table = &string_methods();
  else if (receiver.is_tuple()) table = &tuple_methods();
  else if (receiver.is_list_like()) table = &list_methods();
  else if (receiver.is_object()) table = &dict_methods();
  if (!table) return std::nullopt;
  const std::string type = receiver.type_name();
  for (const auto& [method_name, method] : table->supported) {
    if (name != method_name) continue;
    const std::string full_name = type + "." + method_name;
    Method function = method;
    return Value::callable(full_name, [receiver, function, full_name](Arguments& arguments) {
      ArgumentReader reader(full_name, arguments);
      return function(receiver, reader);
    });
  }
  for (const char* method_name : table->unsafe)
    if (name == method_name)
      return Value::undefined(vt::str("access to attribute '", name, "' of '", type, "' object is unsafe."));
  for (const char* method_name : table->unsupported) {
    if (name != method_name) continue;
    const std::string full_name = type + "." + method_name;
    return Value::callable(full_name, [full_name](Arguments&) -> Value { fail_unsupported("the method " + full_name + "()"); });
  }
  return std::nullopt;
}

}  // namespace vt::jinja
