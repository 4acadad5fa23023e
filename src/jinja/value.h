// The values a template computes with, modelled on what Python hands jinja2: None, bool, int,
// float, str (optionally Markup, i.e. "safe"), list/tuple, dict (insertion-ordered), callables,
// namespace() objects, and jinja2's Undefined (which renders as "" but fails when used further).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vt::jinja {

class Value;
using Array = std::vector<Value>;

class Object;
struct Arguments;

using NativeFunction = std::function<Value(Arguments&)>;

struct Callable {
  std::string name;
  NativeFunction function;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kNamespace, kCallable };
  // What Python type a kArray stands for: only lists and tuples index, print and serialise as such;
  // generators (from map/select/...) and dict views behave as Python's do.
  enum class Flavor : uint8_t { kList, kTuple, kGenerator, kDictItems, kDictKeys, kDictValues };

  Value() = default;  // Undefined, with no name attached
  Value(bool value) : kind_(Kind::kBool), boolean_(value) {}
  Value(int value) : kind_(Kind::kInt), integer_(value) {}
  Value(int64_t value) : kind_(Kind::kInt), integer_(value) {}
  Value(double value) : kind_(Kind::kFloat), number_(value) {}
  Value(std::string value) : Value(string(std::move(value))) {}
  Value(const char* value) : Value(string(value)) {}

  // `message` is what jinja2's UndefinedError would say once the value is used ("'x' is undefined").
  static Value undefined(std::string message);
  static Value none();
  static Value string(std::string value, bool safe = false);
  static Value array(Array items, bool tuple = false);
  static Value sequence(Array items, Flavor flavor);
  static Value object(Object entries);
  static Value make_namespace(Object attributes);
  static Value callable(std::string name, NativeFunction function);
  static Value from_json(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }  // list or tuple
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_tuple() const { return kind_ == Kind::kArray && flavor_ == Flavor::kTuple; }
  // A list or tuple (indexable, sliceable); other flavors only iterate.
  bool is_list_like() const { return kind_ == Kind::kArray && (flavor_ == Flavor::kList || flavor_ == Flavor::kTuple); }
  Flavor flavor() const { return flavor_; }
  bool is_safe() const { return kind_ == Kind::kString && flag_; }  // Markup

  bool as_bool() const { return boolean_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? int64_t(boolean_) : integer_; }  // bool or int
  double as_double() const;  // any number
  const std::string& as_string() const { return *string_; }
  const Array& as_array() const { return *array_; }
  const Object& as_object() const { return *object_; }  // dict or namespace
  Object& namespace_attributes() const { return *object_; }
  const Callable& as_callable() const { return *callable_; }
  const std::string& undefined_message() const;

  bool truthy() const;          // Python bool()
  std::string type_name() const;  // Python's type name, for error messages ("str", "dict", ...)

 private:
  Kind kind_ = Kind::kUndefined;
  bool flag_ = false;  // Markup (strings)
  Flavor flavor_ = Flavor::kList;
  bool boolean_ = false;
  int64_t integer_ = 0;
  double number_ = 0;
  std::shared_ptr<const std::string> string_;  // string, or the undefined message
  std::shared_ptr<const Array> array_;
  std::shared_ptr<Object> object_;  // shared and mutable only for namespaces
  std::shared_ptr<const Callable> callable_;
};

// A Python dict with string keys, in insertion order (json.dumps and iteration depend on it).
class Object {
 public:
  using Entry = std::pair<std::string, Value>;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);  // replaces in place, or appends
  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<Entry> entries_;
};

// Arguments of a call: positional then keyword, as written.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};


// Python semantics used throughout the engine.
bool equals(const Value& left, const Value& right);  // ==
std::string to_str(const Value& value);               // str(); Undefined gives ""
std::string to_repr(const Value& value);              // repr()
std::string float_repr(double value);                 // repr(float): 1.0, 1e-05, 1e+16
std::string string_repr(std::string_view text);       // repr(str): 'it''s' quoting rules

// json.dumps(value, ensure_ascii=..., indent=..., separators=..., sort_keys=...) as HF's tojson.
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: single line
  std::optional<std::pair<std::string, std::string>> separators;  // item, key
  bool sort_keys = false;
};
std::string to_json(const Value& value, const JsonOptions& options);

// Throws the UndefinedError jinja2 raises when an Undefined is used (attribute, call, arithmetic).
[[noreturn]] void fail_undefined(const Value& value);

}  // namespace vt::jinja
