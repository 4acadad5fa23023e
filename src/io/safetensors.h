// Strict safetensors parsing: every size, offset and shape is checked against the file before
// anything is used, so a corrupt or hostile file is an error that names the file and tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/mapped_file.h"

namespace vt {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
};

constexpr uint64_t kMaxSafetensorsHeaderBytes = 100u << 20;

// Parses and validates the header of a safetensors image of `size` bytes. `label` (a path) is put
// in error messages. Throws vt::Error on any inconsistency.
SafetensorsHeader parse_safetensors(const uint8_t* bytes, size_t size, const std::string& label);

// A mapped, validated safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  const SafetensorsEntry* find(const std::string& name) const;
  const void* data(const SafetensorsEntry& entry) const {
    return file_.data() + header_.data_offset + entry.begin;
  }

 private:
  MappedFile file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

}  // namespace vt
