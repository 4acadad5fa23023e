// Filters, tests, methods of str/list/dict, and global functions of vt's Jinja engine
// (filters.cpp, tests.cpp, methods.cpp, globals.cpp). Semantics follow jinja2 3.1 and Python.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"

namespace vt::jinja {

enum class Support { kSupported, kUnsupported, kUnknown };  // kUnsupported: jinja2 has it, vt not

Support filter_support(std::string_view name);
Value apply_filter(std::string_view name, const Value& input, Arguments& arguments);

Support test_support(std::string_view name);
bool apply_test(std::string_view name, const Value& input, Arguments& arguments);

// A bound method of a str, list or dict (Python's attribute lookup finds methods first), or
// nullopt when `receiver` has no such method.
std::optional<Value> find_method(const Value& receiver, std::string_view name);

// jinja2's globals plus HF's: range, dict, namespace, raise_exception, strftime_now.
Object make_globals();

// Argument binding helper for builtins: positional then keyword, Python style.
class ArgumentReader {
 public:
  ArgumentReader(std::string function, Arguments& arguments) : function_(std::move(function)), arguments_(arguments) {}
  // The next parameter, by position or by `name`; `fallback` when neither was given.
  Value take(std::string_view name, Value fallback = Value());
  bool has(std::string_view name) const;  // given by keyword
  // Fails on any argument no parameter took.
  void finish();
  const std::string& function() const { return function_; }

 private:
  std::string function_;
  Arguments& arguments_;
  size_t next_positional_ = 0;
  std::vector<bool> keyword_taken_;
};

// Python operators (operations.cpp): + - * / // % ** on numbers, strings and sequences, with
// Markup's escaping rule for +. `op` is the operator's spelling.
Value arithmetic(std::string_view op, const Value& left, const Value& right);
Value negate(const Value& value);
// str of a Python type, as jinja2 names objects in error messages ("dict object", "None").
std::string object_type_repr(const Value& value);
// markupsafe.escape: & < > " ' as entities; Markup passes through.
Value escape_html(const Value& value);

// Python's ordering (<) across numbers, strings and sequences; TypeError otherwise.
bool less_than(const Value& left, const Value& right);
// `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
// Items of an iterable (str: characters, dict: keys, Undefined: none); TypeError otherwise.
Array iterate(const Value& value);
// Attribute and item lookup as jinja2's sandboxed getattr / getitem (Undefined when missing).
Value get_attribute(const Value& object, std::string_view name);
Value get_item(const Value& object, const Value& key);
// Python slicing of str / list / tuple.
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step);

}  // namespace vt::jinja
