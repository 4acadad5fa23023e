#include "io/safetensors.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace vt {
namespace {

bool valid_utf8(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    int extra;
    uint32_t min_code;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { extra = 1; min_code = 0x80; }
    else if ((c & 0xF0) == 0xE0) { extra = 2; min_code = 0x800; }
    else if ((c & 0xF8) == 0xF0) { extra = 3; min_code = 0x10000; }
    else return false;
    if (i + extra >= n) return false;
    uint32_t code = c & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      uint8_t continuation = s[i + k];
      if ((continuation & 0xC0) != 0x80) return false;
      code = (code << 6) | (continuation & 0x3F);
    }
    if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

uint64_t get_offset(const nlohmann::json& value, const std::string& where) {
  VT_CHECK(value.is_number_unsigned(), where, ": data_offsets must be non-negative integers");
  return value.get<uint64_t>();
}

}  // namespace

SafetensorsHeader parse_safetensors(const uint8_t* bytes, size_t size, const std::string& label) {
  if (size < 8) VT_FAIL(label, ": truncated safetensors file (", size, " bytes, need at least 8)");
  uint64_t header_bytes = read_u64_le(bytes);
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    VT_FAIL(label, ": safetensors header length ", header_bytes, " exceeds the 100 MB limit");
  if (header_bytes > size - 8)
    VT_FAIL(label, ": safetensors header length ", header_bytes, " runs past the end of the file (",
            size, " bytes)");
  const uint8_t* text = bytes + 8;
  if (!valid_utf8(text, header_bytes)) VT_FAIL(label, ": safetensors header is not valid UTF-8");

  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text, text + header_bytes);
  } catch (const nlohmann::json::exception& e) {
    VT_FAIL(label, ": safetensors header is not valid JSON: ", e.what());
  }
  if (!json.is_object()) VT_FAIL(label, ": safetensors header must be a JSON object");

  SafetensorsHeader header;
  header.data_offset = 8 + header_bytes;
  const uint64_t data_bytes = size - header.data_offset;
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& entry = it.value();
    if (name == "__metadata__") {
      VT_CHECK(entry.is_object(), label, ": __metadata__ must be an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        VT_CHECK(m.value().is_string(), label, ": __metadata__.", m.key(), " must be a string");
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = label + ": tensor '" + name + "'";
    VT_CHECK(entry.is_object(), where, ": entry must be an object");
    VT_CHECK(entry.contains("dtype") && entry["dtype"].is_string(), where, ": missing dtype");
    VT_CHECK(entry.contains("shape") && entry["shape"].is_array(), where, ": missing shape");
    VT_CHECK(entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                 entry["data_offsets"].size() == 2,
             where, ": data_offsets must be [begin, end]");
    SafetensorsEntry parsed;
    parsed.name = name;
    const std::string dtype = entry["dtype"].get<std::string>();
    if (!dtype_from_safetensors(dtype, &parsed.dtype)) VT_FAIL(where, ": unknown dtype '", dtype, "'");
    const auto& shape = entry["shape"];
    VT_CHECK(shape.size() <= size_t(Shape::kMaxDims), where, ": rank ", shape.size(), " too large");
    std::vector<int64_t> dims;
    // Element count checked against overflow: it must fit the file anyway.
    uint64_t count = 1;
    for (const auto& dim : shape) {
      VT_CHECK(dim.is_number_unsigned(), where, ": shape entries must be non-negative integers");
      uint64_t d = dim.get<uint64_t>();
      if (d != 0 && count > std::numeric_limits<uint64_t>::max() / 8 / d)
        VT_FAIL(where, ": shape ", shape.dump(), " overflows");
      count *= d;
      dims.push_back(int64_t(d));
    }
    uint64_t expected_bytes = count * dtype_size(parsed.dtype);
    if (expected_bytes > data_bytes)
      VT_FAIL(where, ": shape ", shape.dump(), " needs ", expected_bytes, " bytes, more than the ",
              data_bytes, " bytes of data in the file");
    parsed.shape = Shape(dims);
    parsed.begin = get_offset(entry["data_offsets"][0], where);
    parsed.end = get_offset(entry["data_offsets"][1], where);
    VT_CHECK(parsed.begin <= parsed.end, where, ": data_offsets [", parsed.begin, ", ", parsed.end,
             "] are reversed");
    VT_CHECK(parsed.end <= data_bytes, where, ": data_offsets end ", parsed.end,
             " is past the data section (", data_bytes, " bytes); file truncated?");
    VT_CHECK(parsed.end - parsed.begin == expected_bytes, where, ": data_offsets span ",
             parsed.end - parsed.begin, " bytes but ", dtype, " ", shape.dump(), " needs ",
             expected_bytes);
    header.tensors.push_back(std::move(parsed));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  // The data section must be covered exactly once, in order, with no gaps or overlaps.
  uint64_t cursor = 0;
  for (const auto& entry : header.tensors) {
    if (entry.begin < cursor)
      VT_FAIL(label, ": tensor '", entry.name, "' data [", entry.begin, ", ", entry.end,
              ") overlaps the previous tensor (ends at ", cursor, ")");
    if (entry.begin > cursor)
      VT_FAIL(label, ": gap in data before tensor '", entry.name, "' (bytes ", cursor, " to ",
              entry.begin, " unused)");
    cursor = entry.end;
  }
  if (cursor != data_bytes)
    VT_FAIL(label, ": data section is ", data_bytes, " bytes but the tensors cover ", cursor);
  return header;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  header_ = parse_safetensors(file_.data(), file_.size(), path);
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_[header_.tensors[i].name] = i;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

}  // namespace vt
