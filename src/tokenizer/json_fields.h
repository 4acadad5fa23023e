// Typed reads of tokenizer.json fields that fail with the field's path instead of a JSON
// library exception: a malformed file gets "tokenizer.json: model.merges[3]: ..." not a crash.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/regex.h"

namespace vt {

inline const nlohmann::json& json_field(const nlohmann::json& json, const char* key,
                                        const std::string& where) {
  VT_CHECK(json.is_object(), where, ": expected an object");
  auto found = json.find(key);
  VT_CHECK(found != json.end(), where, ": missing field '", key, "'");
  return *found;
}

inline std::string json_string(const nlohmann::json& json, const char* key,
                               const std::string& where) {
  const auto& value = json_field(json, key, where);
  VT_CHECK(value.is_string(), where, ".", key, ": expected a string");
  return value.get<std::string>();
}

inline const nlohmann::json& json_array(const nlohmann::json& json, const char* key,
                                        const std::string& where) {
  const auto& value = json_field(json, key, where);
  VT_CHECK(value.is_array(), where, ".", key, ": expected an array");
  return value;
}

// An optional field: absent or null gives fallback.
inline bool json_bool_or(const nlohmann::json& json, const char* key, bool fallback,
                         const std::string& where) {
  auto found = json.find(key);
  if (found == json.end() || found->is_null()) return fallback;
  VT_CHECK(found->is_boolean(), where, ".", key, ": expected true or false");
  return found->get<bool>();
}

inline std::string json_string_or(const nlohmann::json& json, const char* key,
                                  const std::string& fallback, const std::string& where) {
  auto found = json.find(key);
  if (found == json.end() || found->is_null()) return fallback;
  VT_CHECK(found->is_string(), where, ".", key, ": expected a string");
  return found->get<std::string>();
}

inline int64_t json_int(const nlohmann::json& json, const char* key, const std::string& where) {
  const auto& value = json_field(json, key, where);
  VT_CHECK(value.is_number_integer(), where, ".", key, ": expected an integer");
  return value.get<int64_t>();
}

// HF's pattern object: {"String": "..."} (literal) or {"Regex": "..."}.
inline Regex json_pattern(const nlohmann::json& json, const std::string& where) {
  const auto& pattern = json_field(json, "pattern", where);
  VT_CHECK(pattern.is_object() && pattern.size() == 1, where,
           ".pattern: expected {\"String\": ...} or {\"Regex\": ...}");
  if (pattern.contains("String")) {
    VT_CHECK(pattern["String"].is_string(), where, ".pattern.String: expected a string");
    const std::string text = pattern["String"].get<std::string>();
    VT_CHECK(!text.empty(), where, ".pattern.String: empty pattern");
    return Regex(text, /*literal=*/true);
  }
  VT_CHECK(pattern.contains("Regex") && pattern["Regex"].is_string(), where,
           ".pattern: expected {\"String\": ...} or {\"Regex\": ...}");
  return Regex(pattern["Regex"].get<std::string>());
}

}  // namespace vt
