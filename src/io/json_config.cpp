#include "io/json_config.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace vt {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) VT_FAIL(path, ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    VT_FAIL(path, ": not valid JSON: ", e.what());
  }
}

JsonObject::JsonObject(const nlohmann::json& json, std::string where)
    : json_(json), where_(std::move(where)) {
  VT_CHECK(json_.is_object(), where_, ": expected a JSON object");
}

bool JsonObject::has(const std::string& key) const {
  return json_.contains(key) && !json_[key].is_null();
}

const nlohmann::json& JsonObject::at(const std::string& key) const {
  if (!has(key)) VT_FAIL(where_, ": missing required key '", key, "'");
  return json_[key];
}

JsonObject JsonObject::child(const std::string& key) const {
  return JsonObject(at(key), where_ + "." + key);
}

std::optional<JsonObject> JsonObject::optional_child(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return child(key);
}

int64_t JsonObject::get_int(const std::string& key) const {
  const auto& value = at(key);
  VT_CHECK(value.is_number_integer(), where_, ".", key, ": expected an integer, got ", value.dump());
  return value.get<int64_t>();
}

int64_t JsonObject::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double JsonObject::get_number(const std::string& key) const {
  const auto& value = at(key);
  VT_CHECK(value.is_number(), where_, ".", key, ": expected a number, got ", value.dump());
  return value.get<double>();
}

double JsonObject::get_number(const std::string& key, double fallback) const {
  return has(key) ? get_number(key) : fallback;
}

bool JsonObject::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& value = json_[key];
  VT_CHECK(value.is_boolean(), where_, ".", key, ": expected true or false, got ", value.dump());
  return value.get<bool>();
}

std::string JsonObject::get_string(const std::string& key) const {
  const auto& value = at(key);
  VT_CHECK(value.is_string(), where_, ".", key, ": expected a string, got ", value.dump());
  return value.get<std::string>();
}

std::string JsonObject::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

std::vector<std::string> JsonObject::get_strings(const std::string& key) const {
  const auto& value = at(key);
  VT_CHECK(value.is_array(), where_, ".", key, ": expected an array of strings");
  std::vector<std::string> out;
  for (const auto& item : value) {
    VT_CHECK(item.is_string(), where_, ".", key, ": expected an array of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::vector<int64_t> JsonObject::get_ints(const std::string& key) const {
  const auto& value = at(key);
  VT_CHECK(value.is_array(), where_, ".", key, ": expected an array of integers");
  std::vector<int64_t> out;
  for (const auto& item : value) {
    VT_CHECK(item.is_number_integer(), where_, ".", key, ": expected an array of integers");
    out.push_back(item.get<int64_t>());
  }
  return out;
}

}  // namespace vt
