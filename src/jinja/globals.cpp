// Global functions a template can call (jinja2's range, dict, namespace; HF's raise_exception and
// strftime_now), and the argument binding helper the builtins share.
#include <chrono>
#include <ctime>

#include "jinja/builtins.h"
#include "jinja/error.h"

namespace vt::jinja {

Value ArgumentReader::take(std::string_view name, Value fallback) {
  if (next_positional_ < arguments_.positional.size()) return arguments_.positional[next_positional_++];
  keyword_taken_.resize(arguments_.keyword.size(), false);
  for (size_t i = 0; i < arguments_.keyword.size(); ++i) {
    if (arguments_.keyword[i].first == name) {
      keyword_taken_[i] = true;
      return arguments_.keyword[i].second;
    }
  }
  return fallback;
}

bool ArgumentReader::has(std::string_view name) const {
  for (const auto& [key, value] : arguments_.keyword)
    if (key == name) return true;
  return false;
}

void ArgumentReader::finish() {
  if (next_positional_ < arguments_.positional.size())
    fail_render(vt::str(function_, "() got ", arguments_.positional.size(), " positional arguments, takes at most ",
                        next_positional_));
  keyword_taken_.resize(arguments_.keyword.size(), false);
  for (size_t i = 0; i < arguments_.keyword.size(); ++i)
    if (!keyword_taken_[i])
      fail_render(vt::str(function_, "() got an unexpected keyword argument '", arguments_.keyword[i].first, "'"));
}

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox refuses larger ranges

Value range_function(Arguments& arguments) {
  if (!arguments.keyword.empty()) fail_render("range() takes no keyword arguments");
  const auto& values = arguments.positional;
  if (values.empty() || values.size() > 3) fail_render(vt::str("range expected 1 to 3 arguments, got ", values.size()));
  for (const Value& value : values)
    if (!value.is_int() && !value.is_bool())
      fail_render("'" + value.type_name() + "' object cannot be interpreted as an integer");
  int64_t start = 0, stop, step = 1;
  if (values.size() == 1) {
    stop = values[0].as_int();
  } else {
    start = values[0].as_int();
    stop = values[1].as_int();
    if (values.size() == 3) step = values[2].as_int();
  }
  if (step == 0) fail_render("range() arg 3 must not be zero");
  const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
  const __int128 magnitude = step > 0 ? step : -__int128(step);
  const __int128 count = span <= 0 ? 0 : (span + magnitude - 1) / magnitude;
  if (count > kMaxRange)
    fail_render("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  Array items;
  for (int64_t i = 0; i < int64_t(count); ++i) items.push_back(Value(start + i * step));
  return Value::array(std::move(items));
}

// dict(mapping_or_pairs?, **kwargs) — also how namespace() initialises its attributes.
Object dict_from(Arguments& arguments, const char* function) {
  Object entries;
  if (arguments.positional.size() > 1) fail_render(vt::str(function, " expected at most 1 positional argument"));
  if (!arguments.positional.empty()) {
    const Value& source = arguments.positional[0];
    if (source.is_object() || source.is_namespace()) {
      for (const auto& [key, value] : source.as_object().entries()) entries.set(key, value);
    } else {
      for (const Value& pair : iterate(source)) {
        const Array items = iterate(pair);
        if (items.size() != 2) fail_render("dictionary update sequence element has the wrong length");
        if (!items[0].is_string()) fail_unsupported("dict keys that are not strings");
        entries.set(items[0].as_string(), items[1]);
      }
    }
  }
  for (auto& [key, value] : arguments.keyword) entries.set(key, value);
  return entries;
}

// datetime.now().strftime(format): C strftime, except %f (microseconds) and the naive %z / %Z ("").
Value strftime_now(Arguments& arguments) {
  if (arguments.positional.size() != 1 || !arguments.positional[0].is_string() || !arguments.keyword.empty())
    fail_render("strftime_now() takes one string argument");
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm local{};
  localtime_r(&seconds, &local);
  const std::string& format = arguments.positional[0].as_string();
  std::string prepared;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char code = format[i + 1];
      ++i;
      if (code == 'f') prepared += vt::str(std::string(6 - std::to_string(micros).size(), '0'), micros);
      else if (code == 'z' || code == 'Z') continue;
      else prepared += std::string("%") + code;
    } else {
      prepared.push_back(format[i]);
    }
  }
  if (prepared.empty()) return Value("");
  std::string out(prepared.size() * 4 + 256, '\0');
  const size_t written = std::strftime(out.data(), out.size(), prepared.c_str(), &local);
  out.resize(written);
  return Value(std::move(out));
}

}  // namespace

Object make_globals() {
  Object globals;
  globals.set("range", Value::callable("range", range_function));
  globals.set("dict", Value::callable("dict", [](Arguments& arguments) { return Value::object(dict_from(arguments, "dict")); }));
  globals.set("namespace", Value::callable("namespace", [](Arguments& arguments) {
    return Value::make_namespace(dict_from(arguments, "namespace"));
  }));
  globals.set("raise_exception", Value::callable("raise_exception", [](Arguments& arguments) -> Value {
    const std::string message = arguments.positional.empty() ? "" : to_str(arguments.positional[0]);
    throw TemplateError(TemplateError::Kind::kRaised, message);
  }));
  globals.set("strftime_now", Value::callable("strftime_now", strftime_now));
  for (const char* name : {"lipsum", "cycler", "joiner"}) {
    const std::string function = name;
    globals.set(function, Value::callable(function, [function](Arguments&) -> Value {
      fail_unsupported("the global function " + function + "()");
    }));
  }
  return globals;
}

}  // namespace vt::jinja
