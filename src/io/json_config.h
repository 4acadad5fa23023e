// Typed reads of JSON config files with errors that name the file and the key path.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace vt {

nlohmann::json read_json_file(const std::string& path);

// A JSON object plus where it came from ("config.json: text_config"), for error messages.
class JsonObject {
 public:
  JsonObject(const nlohmann::json& json, std::string where);

  bool has(const std::string& key) const;
  JsonObject child(const std::string& key) const;  // required object
  std::optional<JsonObject> optional_child(const std::string& key) const;

  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_number(const std::string& key) const;
  double get_number(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<std::string> get_strings(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;

  const nlohmann::json& raw() const { return json_; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& at(const std::string& key) const;
  const nlohmann::json& json_;
  std::string where_;
};

}  // namespace vt
