// Value construction, conversion from JSON input, truthiness and Python equality.
#include "jinja/value.h"

#include "jinja/error.h"

namespace vt::jinja {

const Value* Object::find(std::string_view key) const {
  for (const auto& entry : entries_)
    if (entry.first == key) return &entry.second;
  return nullptr;
}

void Object::set(std::string key, Value value) {
  for (auto& entry : entries_) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string message) {
  Value value;
  value.string_ = std::make_shared<const std::string>(std::move(message));
  return value;
}

Value Value::none() {
  Value value;
  value.kind_ = Kind::kNone;
  return value;
}

Value Value::string(std::string text, bool safe) {
  Value value;
  value.kind_ = Kind::kString;
  value.flag_ = safe;
  value.string_ = std::make_shared<const std::string>(std::move(text));
  return value;
}

Value Value::array(Array items, bool tuple) {
  return sequence(std::move(items), tuple ? Flavor::kTuple : Flavor::kList);
}

Value Value::sequence(Array items, Flavor flavor) {
  Value value;
  value.kind_ = Kind::kArray;
  value.flavor_ = flavor;
  value.array_ = std::make_shared<const Array>(std::move(items));
  return value;
}

Value Value::object(Object entries) {
  Value value;
  value.kind_ = Kind::kObject;
  value.object_ = std::make_shared<Object>(std::move(entries));
  return value;
}

Value Value::make_namespace(Object attributes) {
  Value value;
  value.kind_ = Kind::kNamespace;
  value.object_ = std::make_shared<Object>(std::move(attributes));
  return value;
}

Value Value::callable(std::string name, NativeFunction function) {
  Value value;
  value.kind_ = Kind::kCallable;
  value.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(function)});
  return value;
}

namespace {

constexpr int kMaxJsonDepth = 512;

Value from_json_at(const nlohmann::ordered_json& json, int depth);

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& json) { return from_json_at(json, 0); }

namespace {

Value from_json_at(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxJsonDepth) fail_unsupported(vt::str("JSON input nested more than ", kMaxJsonDepth, " levels deep"));
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t number = json.get<uint64_t>();
      if (number > uint64_t(INT64_MAX)) fail_unsupported(vt::str("integer ", number, " (vt uses 64-bit integers)"));
      return Value(int64_t(number));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json_at(item, depth + 1));
      return Value::array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object entries;
      for (const auto& [key, item] : json.items()) entries.set(key, from_json_at(item, depth + 1));
      return Value::object(std::move(entries));
    }
    default: fail_unsupported("binary JSON values");
  }
}

}  // namespace

double Value::as_double() const {
  if (kind_ == Kind::kFloat) return number_;
  return double(as_int());
}

const std::string& Value::undefined_message() const {
  static const std::string kDefault = "value is undefined";
  return string_ ? *string_ : kDefault;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return boolean_;
    case Kind::kInt: return integer_ != 0;
    case Kind::kFloat: return number_ != 0;
    case Kind::kString: return !string_->empty();
    case Kind::kArray: return flavor_ == Flavor::kGenerator || !array_->empty();
    case Kind::kObject: return object_->size() != 0;
    case Kind::kNamespace:
    case Kind::kCallable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return flag_ ? "Markup" : "str";
    case Kind::kArray:
      switch (flavor_) {
        case Flavor::kList: return "list";
        case Flavor::kTuple: return "tuple";
        case Flavor::kGenerator: return "generator";
        case Flavor::kDictItems: return "dict_items";
        case Flavor::kDictKeys: return "dict_keys";
        case Flavor::kDictValues: return "dict_values";
      }
      return "list";
    case Kind::kObject: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "object";
}

static bool equals_at(const Value& left, const Value& right, int depth);

bool equals(const Value& left, const Value& right) { return equals_at(left, right, 0); }

static bool equals_at(const Value& left, const Value& right, int depth) {
  if (depth > 512) fail_unsupported("comparing values nested more than 512 levels deep");
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) return left.as_double() == right.as_double();
    return left.as_int() == right.as_int();
  }
  if (left.kind() != right.kind()) return false;
  switch (left.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return left.as_string() == right.as_string();
    case Value::Kind::kArray: {
      if (left.flavor() != right.flavor()) return false;  // (1, 2) != [1, 2] in Python
      if (left.flavor() == Value::Flavor::kGenerator) return &left.as_array() == &right.as_array();
      const Array& a = left.as_array();
      const Array& b = right.as_array();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!equals_at(a[i], b[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::kObject: {
      const Object& a = left.as_object();
      const Object& b = right.as_object();
      if (a.size() != b.size()) return false;
      for (const auto& [key, item] : a.entries()) {
        const Value* other = b.find(key);
        if (!other || !equals_at(item, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace: return &left.namespace_attributes() == &right.namespace_attributes();
    case Value::Kind::kCallable: return &left.as_callable() == &right.as_callable();
    default: return false;
  }
}

void fail_undefined(const Value& value) { fail_render(value.undefined_message()); }

}  // namespace vt::jinja
