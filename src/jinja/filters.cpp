// Jinja filters (jinja2/filters.py semantics) plus HF's tojson, which is json.dumps with
// ensure_ascii=False and the caller's indent / separators / sort_keys.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/unicode.h"

namespace vt::jinja {
namespace {

using Filter = Value (*)(const Value& input, ArgumentReader& arguments);

std::string text_of(const Value& value) { return to_str(value); }

// soft_str: Markup stays Markup.
Value soft_string(const Value& value, std::string text) { return Value::string(std::move(text), value.is_safe()); }

// jinja2's ignore_case: lower-cases strings for case-insensitive sort/unique/min/max.
Value ignore_case(const Value& value) { return value.is_string() ? Value(unicode::lower(value.as_string())) : value; }

// make_attrgetter: "a.b.0" looked up item-wise (getitem), integer parts as integers.
Value lookup_path(const Value& item, const Value& attribute, const Value& fallback = Value()) {
  if (attribute.is_none() || attribute.is_undefined()) return item;
  Value current = item;
  if (!attribute.is_string()) return get_item(current, attribute);
  std::string_view path = attribute.as_string();
  while (true) {
    const size_t dot = path.find('.');
    const std::string part(path.substr(0, dot));
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    current = get_item(current, digits ? Value(int64_t(std::atoll(part.c_str()))) : Value(part));
    if (!fallback.is_undefined() && current.is_undefined()) current = fallback;
    if (dot == std::string_view::npos) break;
    path.remove_prefix(dot + 1);
  }
  return current;
}

Value filter_abs(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  if (input.is_float()) return Value(std::fabs(input.as_double()));
  if (input.is_number()) return Value(input.as_int() < 0 ? -input.as_int() : input.as_int());
  fail_render("bad operand type for abs(): '" + input.type_name() + "'");
}

Value filter_attr(const Value& input, ArgumentReader& arguments) {
  const Value name = arguments.take("name");
  arguments.finish();
  if (input.is_undefined()) fail_undefined(input);
  if (!name.is_string()) fail_render("attribute name must be a string");
  if (std::optional<Value> method = find_method(input, name.as_string())) return *method;
  if (input.is_namespace())
    if (const Value* value = input.as_object().find(name.as_string())) return *value;
  return Value::undefined(vt::str("'", object_type_repr(input), "' has no attribute '", name.as_string(), "'"));
}

Value filter_capitalize(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  return soft_string(input, unicode::capitalize(text_of(input)));
}

Value filter_center(const Value& input, ArgumentReader& arguments) {
  const Value width = arguments.take("width", Value(80));
  arguments.finish();
  const std::string text = text_of(input);
  const int64_t length = int64_t(unicode::length(text));
  if (!width.is_int() || width.as_int() <= length) return Value(text);
  // str.center: the extra space goes right unless both the margin and the width are odd.
  const int64_t margin = width.as_int() - length;
  const int64_t left = margin / 2 + (margin & width.as_int() & 1);
  return Value(std::string(size_t(left), ' ') + text + std::string(size_t(margin - left), ' '));
}

Value filter_length(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  switch (input.kind()) {
    case Value::Kind::kUndefined: return Value(0);
    case Value::Kind::kString: return Value(int64_t(unicode::length(input.as_string())));
    case Value::Kind::kArray:
      if (input.flavor() == Value::Flavor::kGenerator) fail_render("object of type 'generator' has no len()");
      return Value(int64_t(input.as_array().size()));
    case Value::Kind::kObject: return Value(int64_t(input.as_object().size()));
    default: fail_render("object of type '" + input.type_name() + "' has no len()");
  }
}

Value filter_default(const Value& input, ArgumentReader& arguments) {
  const Value fallback = arguments.take("default_value", Value(""));
  const Value boolean = arguments.take("boolean", Value(false));
  arguments.finish();
  if (input.is_undefined() || (boolean.truthy() && !input.truthy())) return fallback;
  return input;
}

Value sorted_pairs(Array pairs, size_t position, bool case_sensitive, bool reverse);

Value filter_dictsort(const Value& input, ArgumentReader& arguments) {
  const bool case_sensitive = arguments.take("case_sensitive", Value(false)).truthy();
  const Value by = arguments.take("by", Value("key"));
  const bool reverse = arguments.take("reverse", Value(false)).truthy();
  arguments.finish();
  if (!input.is_object()) fail_render("dictsort expects a mapping");
  size_t position;
  if (by.is_string() && by.as_string() == "key") position = 0;
  else if (by.is_string() && by.as_string() == "value") position = 1;
  else fail_render("You can only sort by either \"key\" or \"value\"");
  Array pairs;
  for (const auto& [key, value] : input.as_object().entries()) pairs.push_back(Value::array({Value(key), value}, true));
  return sorted_pairs(std::move(pairs), position, case_sensitive, reverse);
}

// Python's sorted(): stable, and reverse=True keeps equal items in their original order.
Array stable_sorted(Array items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reverse ? less_than(keys[b], keys[a]) : less_than(keys[a], keys[b]);
  });
  Array out;
  for (size_t i : order) out.push_back(items[i]);
  return out;
}

Value sorted_pairs(Array pairs, size_t position, bool case_sensitive, bool reverse) {
  std::vector<Value> keys;
  for (const Value& pair : pairs) {
    const Value& key = pair.as_array()[position];
    keys.push_back(case_sensitive ? key : ignore_case(key));
  }
  return Value::array(stable_sorted(std::move(pairs), keys, reverse));
}

Value filter_escape(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  return escape_html(input);
}

Value filter_forceescape(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  return escape_html(Value(text_of(input)));
}

Value filter_first(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  const Array items = iterate(input);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value filter_last(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  if (!input.is_string() && !input.is_list_like() && !input.is_object() && !input.is_undefined())
    fail_render("'" + input.type_name() + "' object is not reversible");
  const Array items = iterate(input);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

// Python float(str): surrounding whitespace and underscores between digits allowed; inf/nan.
bool parse_python_float(std::string text, double& out) {
  text = unicode::strip(text, true, true);
  std::string cleaned;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '_') {
      if (i == 0 || i + 1 == text.size() || !std::isdigit(static_cast<unsigned char>(text[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(text[i + 1])))
        return false;
      continue;
    }
    cleaned.push_back(text[i]);
  }
  if (cleaned.empty() || cleaned.find_first_of("xXpP") != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(cleaned.c_str(), &end);
  return end == cleaned.c_str() + cleaned.size();
}

bool parse_python_int(std::string text, int base, int64_t& out) {
  text = unicode::strip(text, true, true);
  std::string cleaned;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '_' && i > 0 && i + 1 < text.size() && std::isalnum(static_cast<unsigned char>(text[i - 1])) &&
        std::isalnum(static_cast<unsigned char>(text[i + 1])))
      continue;
    cleaned.push_back(text[i]);
  }
  if (cleaned.empty()) return false;
  size_t start = (cleaned[0] == '+' || cleaned[0] == '-') ? 1 : 0;
  if (start == cleaned.size() || !std::isalnum(static_cast<unsigned char>(cleaned[start]))) return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtoll(cleaned.c_str(), &end, base);
  if (errno == ERANGE) fail_unsupported("integers beyond 64 bits");
  return end == cleaned.c_str() + cleaned.size();
}

Value filter_int(const Value& input, ArgumentReader& arguments) {
  const Value fallback = arguments.take("default", Value(0));
  const Value base = arguments.take("base", Value(10));
  arguments.finish();
  if (input.is_bool() || input.is_int()) return Value(input.as_int());
  if (input.is_float()) {
    const double number = input.as_double();
    if (!std::isfinite(number)) return fallback;
    if (std::fabs(number) >= 9.2e18) fail_unsupported("integers beyond 64 bits");
    return Value(int64_t(std::trunc(number)));
  }
  if (input.is_string()) {
    int64_t integer;
    if (parse_python_int(input.as_string(), int(base.as_int()), integer)) return Value(integer);
    double number;
    if (parse_python_float(input.as_string(), number) && std::isfinite(number)) {
      if (std::fabs(number) >= 9.2e18) fail_unsupported("integers beyond 64 bits");
      return Value(int64_t(std::trunc(number)));
    }
  }
  return fallback;
}

Value filter_float(const Value& input, ArgumentReader& arguments) {
  const Value fallback = arguments.take("default", Value(0.0));
  arguments.finish();
  if (input.is_number()) return Value(input.as_double());
  double number;
  if (input.is_string() && parse_python_float(input.as_string(), number)) return Value(number);
  return fallback;
}

Value filter_indent(const Value& input, ArgumentReader& arguments) {
  const Value width = arguments.take("width", Value(4));
  const bool first = arguments.take("first", Value(false)).truthy();
  const bool blank = arguments.take("blank", Value(false)).truthy();
  arguments.finish();
  const std::string indentation = width.is_string() ? width.as_string() : std::string(size_t(std::max<int64_t>(0, width.as_int())), ' ');
  // str.splitlines on text + "\n": split at \n, \r, \r\n and the other Unicode line breaks.
  const std::u32string text = unicode::decode(text_of(input) + "\n");
  std::vector<std::u32string> lines;
  std::u32string line;
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const bool breaks = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                        c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!breaks) {
      line.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    lines.push_back(std::move(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(std::move(line));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string encoded = unicode::encode(lines[i]);
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !encoded.empty())) out += indentation;
    out += encoded;
  }
  if (first) out = indentation + out;
  return soft_string(input, std::move(out));
}

Value filter_items(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  if (input.is_undefined()) return Value::sequence({}, Value::Flavor::kGenerator);
  if (!input.is_object()) fail_render("Can only get item pairs from a mapping.");
  Array pairs;
  for (const auto& [key, value] : input.as_object().entries()) pairs.push_back(Value::array({Value(key), value}, true));
  return Value::sequence(std::move(pairs), Value::Flavor::kGenerator);
}

Value filter_join(const Value& input, ArgumentReader& arguments) {
  const Value separator = arguments.take("d", Value(""));
  const Value attribute = arguments.take("attribute", Value::none());
  arguments.finish();
  std::string out;
  bool first = true;
  for (const Value& item : iterate(input)) {
    if (!first) out += text_of(separator);
    first = false;
    out += text_of(lookup_path(item, attribute));
  }
  return Value(std::move(out));
}

Value filter_list(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  return Value::array(iterate(input));
}

Value filter_lower(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  return soft_string(input, unicode::lower(text_of(input)));
}

Value filter_upper(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  return soft_string(input, unicode::upper(text_of(input)));
}

Value min_or_max(const Value& input, ArgumentReader& arguments, bool maximum) {
  const bool case_sensitive = arguments.take("case_sensitive", Value(false)).truthy();
  const Value attribute = arguments.take("attribute", Value::none());
  arguments.finish();
  const Array items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    Value value = lookup_path(item, attribute);
    return case_sensitive ? value : ignore_case(value);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value candidate = key(items[i]);
    if (maximum ? less_than(best_key, candidate) : less_than(candidate, best_key)) best = i, best_key = candidate;
  }
  return items[best];
}

Value filter_max(const Value& input, ArgumentReader& arguments) { return min_or_max(input, arguments, true); }
Value filter_min(const Value& input, ArgumentReader& arguments) { return min_or_max(input, arguments, false); }

Value filter_replace(const Value& input, ArgumentReader& arguments) {
  const Value old_text = arguments.take("old");
  const Value new_text = arguments.take("new");
  const Value count = arguments.take("count", Value::none());
  arguments.finish();
  Arguments method_arguments{{Value(text_of(old_text)), Value(text_of(new_text))}, {}};
  if (count.is_int()) method_arguments.positional.push_back(count);
  return find_method(Value(text_of(input)), "replace")->as_callable().function(method_arguments);
}

Value filter_reverse(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  if (input.is_string()) {
    std::u32string text = unicode::decode(input.as_string());
    std::reverse(text.begin(), text.end());
    return Value(unicode::encode(text));
  }
  Array items = iterate(input);
  std::reverse(items.begin(), items.end());
  // reversed() gives an iterator for sequences; only non-reversible iterables become a list.
  const bool reversible = !(input.is_array() && input.flavor() == Value::Flavor::kGenerator);
  return Value::sequence(std::move(items), reversible ? Value::Flavor::kGenerator : Value::Flavor::kList);
}

Value filter_round(const Value& input, ArgumentReader& arguments) {
  const Value precision = arguments.take("precision", Value(0));
  const Value method = arguments.take("method", Value("common"));
  arguments.finish();
  const std::string how = text_of(method);
  if (how != "common" && how != "ceil" && how != "floor") fail_render("method must be common, ceil or floor");
  if (!input.is_number()) fail_render("type " + input.type_name() + " doesn't define __round__ method");
  const int64_t digits = precision.as_int();
  if (how == "common") {
    if (!input.is_float()) return Value(input.as_int());  // round(int, n) stays an int for n >= 0
    // Python rounds the exact binary value half-to-even, as printf's correctly rounded %.*f does.
    if (digits < 0 || digits > 300) fail_unsupported("round() with that precision");
    char buffer[400];
    std::snprintf(buffer, sizeof(buffer), "%.*f", int(digits), input.as_double());
    return Value(std::strtod(buffer, nullptr));
  }
  const double scale = std::pow(10.0, double(digits));
  const double scaled = input.as_double() * scale;
  return Value((how == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value filter_safe(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  return Value::string(text_of(input), true);
}

Value filter_sort(const Value& input, ArgumentReader& arguments) {
  const bool reverse = arguments.take("reverse", Value(false)).truthy();
  const bool case_sensitive = arguments.take("case_sensitive", Value(false)).truthy();
  const Value attribute = arguments.take("attribute", Value::none());
  arguments.finish();
  Array items = iterate(input);
  std::vector<Value> keys;
  for (const Value& item : items) {
    if (attribute.is_string() && attribute.as_string().find(',') != std::string::npos) {
      Array parts;
      std::string_view list = attribute.as_string();
      while (true) {
        const size_t comma = list.find(',');
        const Value part = lookup_path(item, Value(std::string(list.substr(0, comma))));
        parts.push_back(case_sensitive ? part : ignore_case(part));
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
      keys.push_back(Value::array(std::move(parts)));
    } else {
      const Value key = lookup_path(item, attribute);
      keys.push_back(Value::array({case_sensitive ? key : ignore_case(key)}));
    }
  }
  return Value::array(stable_sorted(std::move(items), keys, reverse));
}

Value filter_string(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  return input.is_safe() ? input : Value(text_of(input));
}

Value filter_sum(const Value& input, ArgumentReader& arguments) {
  const Value attribute = arguments.take("attribute", Value::none());
  Value total = arguments.take("start", Value(0));
  arguments.finish();
  for (const Value& item : iterate(input)) total = arithmetic("+", total, lookup_path(item, attribute));
  return total;
}

Value filter_title(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  // jinja2's do_title: split before runs of [-\s({\[<], then item[0].upper() + item[1:].lower().
  const std::u32string text = unicode::decode(text_of(input));
  std::string out;
  size_t i = 0;
  auto is_separator = [](char32_t c) { return unicode::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  while (i < text.size()) {
    size_t end = i;
    const bool separator = is_separator(text[i]);
    while (end < text.size() && is_separator(text[end]) == separator) ++end;
    const std::string piece = unicode::encode(text.substr(i, end - i));
    if (separator) {
      out += piece;
    } else {
      std::string head;
      unicode::append(head, text[i]);
      out += unicode::upper(head) + unicode::lower(unicode::encode(text.substr(i + 1, end - i - 1)));
    }
    i = end;
  }
  return soft_string(input, std::move(out));
}

Value filter_tojson(const Value& input, ArgumentReader& arguments) {
  JsonOptions options;
  options.ensure_ascii = arguments.take("ensure_ascii", Value(false)).truthy();
  const Value indent = arguments.take("indent", Value::none());
  const Value separators = arguments.take("separators", Value::none());
  options.sort_keys = arguments.take("sort_keys", Value(false)).truthy();
  arguments.finish();
  if (indent.is_string()) options.indent = indent.as_string();
  else if (indent.is_int()) options.indent = std::string(size_t(std::max<int64_t>(0, indent.as_int())), ' ');
  else if (!indent.is_none()) fail_render("tojson: indent must be an integer or a string");
  if (separators.is_array() && separators.as_array().size() == 2 && separators.as_array()[0].is_string() &&
      separators.as_array()[1].is_string())
    options.separators = std::make_pair(separators.as_array()[0].as_string(), separators.as_array()[1].as_string());
  else if (!separators.is_none()) fail_render("tojson: separators must be an (item, key) pair of strings");
  return Value(to_json(input, options));
}

Value filter_trim(const Value& input, ArgumentReader& arguments) {
  const Value chars = arguments.take("chars", Value::none());
  arguments.finish();
  if (chars.is_string()) {
    const std::u32string set = unicode::decode(chars.as_string());
    return soft_string(input, unicode::strip(text_of(input), true, true, &set));
  }
  return soft_string(input, unicode::strip(text_of(input), true, true));
}

Value filter_unique(const Value& input, ArgumentReader& arguments) {
  const bool case_sensitive = arguments.take("case_sensitive", Value(false)).truthy();
  const Value attribute = arguments.take("attribute", Value::none());
  arguments.finish();
  Array seen, out;
  for (const Value& item : iterate(input)) {
    Value key = lookup_path(item, attribute);
    if (!case_sensitive) key = ignore_case(key);
    if (key.is_array() && !key.is_tuple()) fail_render("unhashable type: 'list'");
    if (key.is_object()) fail_render("unhashable type: 'dict'");
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& other) { return equals(other, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::sequence(std::move(out), Value::Flavor::kGenerator);
}

Value filter_wordcount(const Value& input, ArgumentReader& arguments) {
  arguments.finish();
  // re.findall(r"\w+"): runs of letters, digits and underscores (ASCII view; other text fails).
  int64_t count = 0;
  bool in_word = false;
  for (char32_t c : unicode::decode(text_of(input))) {
    if (c >= 0x80 && !unicode::is_space(c)) fail_unsupported("wordcount of non-ASCII text");
    const bool word = std::isalnum(int(c)) || c == '_';
    if (word && !in_word) ++count;
    in_word = word;
  }
  return Value(count);
}

Value filter_batch(const Value& input, ArgumentReader& arguments) {
  const Value size = arguments.take("linecount");
  const Value fill = arguments.take("fill_with", Value::none());
  arguments.finish();
  if (!size.is_int() || size.as_int() <= 0) fail_render("batch: linecount must be a positive integer");
  Array batches, current;
  for (const Value& item : iterate(input)) {
    current.push_back(item);
    if (int64_t(current.size()) == size.as_int()) batches.push_back(Value::array(std::move(current))), current.clear();
  }
  if (!current.empty()) {
    if (!fill.is_none())
      while (int64_t(current.size()) < size.as_int()) current.push_back(fill);
    batches.push_back(Value::array(std::move(current)));
  }
  return Value::sequence(std::move(batches), Value::Flavor::kGenerator);
}

const std::map<std::string, Filter, std::less<>>& filters() {
  static const std::map<std::string, Filter, std::less<>> table = {
      {"abs", filter_abs},           {"attr", filter_attr},         {"batch", filter_batch},
      {"capitalize", filter_capitalize}, {"center", filter_center}, {"count", filter_length},
      {"d", filter_default},         {"default", filter_default},   {"dictsort", filter_dictsort},
      {"e", filter_escape},          {"escape", filter_escape},     {"first", filter_first},
      {"float", filter_float},       {"forceescape", filter_forceescape}, {"indent", filter_indent},
      {"int", filter_int},           {"items", filter_items},       {"join", filter_join},
      {"last", filter_last},         {"length", filter_length},     {"list", filter_list},
      {"lower", filter_lower},       {"max", filter_max},           {"min", filter_min},
      {"replace", filter_replace},   {"reverse", filter_reverse},   {"round", filter_round},
      {"safe", filter_safe},         {"sort", filter_sort},         {"string", filter_string},
      {"sum", filter_sum},           {"title", filter_title},       {"tojson", filter_tojson},
      {"trim", filter_trim},         {"unique", filter_unique},     {"upper", filter_upper},
      {"wordcount", filter_wordcount},
  };
  return table;
}

// map / select / reject / selectattr / rejectattr take *args for the filter or test they apply.
Value apply_map(const Value& input, Arguments& arguments) {
  Array out;
  const Array items = iterate(input);
  if (arguments.positional.empty()) {
    Value attribute, fallback;
    Object unexpected;
    for (auto& [key, value] : arguments.keyword) {
      if (key == "attribute") attribute = value;
      else if (key == "default") fallback = value;
      else fail_render("Unexpected keyword argument '" + key + "'");
    }
    if (attribute.is_undefined()) fail_render("map requires a filter argument");
    for (const Value& item : items) out.push_back(lookup_path(item, attribute, fallback));
    return Value::sequence(std::move(out), Value::Flavor::kGenerator);
  }
  const Value name = arguments.positional[0];
  if (!name.is_string()) fail_render("map: the filter name must be a string");
  const Support support = filter_support(name.as_string());
  if (support == Support::kUnknown) fail_render("No filter named '" + name.as_string() + "'.");
  if (support == Support::kUnsupported) fail_unsupported("the '" + name.as_string() + "' filter");
  for (const Value& item : items) {
    Arguments rest{{arguments.positional.begin() + 1, arguments.positional.end()}, arguments.keyword};
    out.push_back(apply_filter(name.as_string(), item, rest));
  }
  return Value::sequence(std::move(out), Value::Flavor::kGenerator);
}

Value apply_select(const Value& input, Arguments& arguments, bool keep, bool by_attribute) {
  size_t offset = 0;
  Value attribute;
  if (by_attribute) {
    if (arguments.positional.empty()) fail_render("Missing parameter for attribute name");
    attribute = arguments.positional[0];
    offset = 1;
  }
  std::optional<std::string> test;
  if (arguments.positional.size() > offset) {
    if (!arguments.positional[offset].is_string()) fail_render("the test name must be a string");
    test = arguments.positional[offset].as_string();
    const Support support = test_support(*test);
    if (support == Support::kUnknown) fail_render("No test named '" + *test + "'.");
    if (support == Support::kUnsupported) fail_unsupported("the '" + *test + "' test");
  }
  Array out;
  if (!input.truthy()) return Value::sequence({}, Value::Flavor::kGenerator);
  for (const Value& item : iterate(input)) {
    const Value subject = by_attribute ? lookup_path(item, attribute) : item;
    bool passed;
    if (test) {
      Arguments rest{{arguments.positional.begin() + offset + 1, arguments.positional.end()}, arguments.keyword};
      passed = apply_test(*test, subject, rest);
    } else {
      passed = subject.truthy();
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::sequence(std::move(out), Value::Flavor::kGenerator);
}

constexpr const char* kUnsupportedFilters[] = {"filesizeformat", "format", "groupby", "pprint", "random",
                                               "slice", "striptags", "truncate", "urlencode", "urlize",
                                               "wordwrap", "xmlattr"};

}  // namespace

Support filter_support(std::string_view name) {
  if (filters().count(name) || name == "map" || name == "select" || name == "reject" || name == "selectattr" ||
      name == "rejectattr")
    return Support::kSupported;
  for (const char* unsupported : kUnsupportedFilters)
    if (name == unsupported) return Support::kUnsupported;
  return Support::kUnknown;
}

Value apply_filter(std::string_view name, const Value& input, Arguments& arguments) {
  if (name == "map") return apply_map(input, arguments);
  if (name == "select") return apply_select(input, arguments, true, false);
  if (name == "reject") return apply_select(input, arguments, false, false);
  if (name == "selectattr") return apply_select(input, arguments, true, true);
  if (name == "rejectattr") return apply_select(input, arguments, false, true);
  const auto found = filters().find(name);
  if (found == filters().end()) fail_render("No filter named '" + std::string(name) + "'.");
  ArgumentReader reader(std::string(name), arguments);
  return found->second(input, reader);
}

}  // namespace vt::jinja
