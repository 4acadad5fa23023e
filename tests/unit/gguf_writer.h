// Builds GGUF images in memory for parser tests: valid ones, and any field set to a hostile value.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace vt::testing {

inline void put_u32(std::string& out, uint32_t value) { out.append(reinterpret_cast<const char*>(&value), 4); }
inline void put_u64(std::string& out, uint64_t value) { out.append(reinterpret_cast<const char*>(&value), 8); }
inline void put_string(std::string& out, const std::string& text) {
  put_u64(out, text.size());
  out += text;
}

// Encoded metadata entries; value types numbered as in the GGUF spec.
inline std::string kv_u32(const std::string& key, uint32_t value) {
  std::string out;
  put_string(out, key);
  put_u32(out, 4);
  put_u32(out, value);
  return out;
}
inline std::string kv_f32(const std::string& key, float value) {
  std::string out;
  put_string(out, key);
  put_u32(out, 6);
  out.append(reinterpret_cast<const char*>(&value), 4);
  return out;
}
inline std::string kv_string(const std::string& key, const std::string& value) {
  std::string out;
  put_string(out, key);
  put_u32(out, 8);
  put_string(out, value);
  return out;
}
inline std::string kv_strings(const std::string& key, const std::vector<std::string>& values) {
  std::string out;
  put_string(out, key);
  put_u32(out, 9);
  put_u32(out, 8);
  put_u64(out, values.size());
  for (const auto& value : values) put_string(out, value);
  return out;
}

// A tensor info: dims in GGUF order (ne[0], the row length, first).
inline std::string tensor_info(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                               uint64_t offset) {
  std::string out;
  put_string(out, name);
  put_u32(out, uint32_t(dims.size()));
  for (uint64_t d : dims) put_u64(out, d);
  put_u32(out, type);
  put_u64(out, offset);
  return out;
}

struct GgufBuilder {
  uint32_t version = 3;
  std::vector<std::string> metadata;  // kv_* entries
  std::vector<std::string> tensors;   // tensor_info entries
  std::string data;                   // the data section
  uint64_t alignment = 32;
  int64_t tensor_count = -1, kv_count = -1;  // >= 0 overrides the real counts

  std::string build() const {
    std::string out = "GGUF";
    put_u32(out, version);
    put_u64(out, tensor_count >= 0 ? uint64_t(tensor_count) : tensors.size());
    put_u64(out, kv_count >= 0 ? uint64_t(kv_count) : metadata.size());
    for (const auto& entry : metadata) out += entry;
    for (const auto& entry : tensors) out += entry;
    out.append((alignment - out.size() % alignment) % alignment, '\0');
    return out + data;
  }
};

}  // namespace vt::testing
