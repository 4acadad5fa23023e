// Strict GGUF (v2, v3) parsing: header, metadata key-values, tensor infos, alignment and data
// offsets, every count and size checked against the file before anything is allocated or read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"
#include "io/gguf_quants.h"
#include "io/mapped_file.h"

namespace vt {

// Value types of GGUF metadata, numbered as in the file.
enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType type);

// One metadata value: a scalar, or an array of scalars (GGUF arrays of arrays are rejected).
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  GgufValueType element_type = GgufValueType::kU8;  // arrays only
  // Integers as int64_t, except unsigned 64-bit values (kept as uint64_t); floats as double.
  using Scalar = std::variant<int64_t, uint64_t, double, bool, std::string>;
  Scalar scalar;
  std::vector<Scalar> array;
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  Shape shape;          // row-major, outermost first (GGUF's ne[] reversed): [rows, cols]
  uint64_t offset = 0;  // byte offset relative to the start of the data section
  uint64_t bytes = 0;
};

struct GgufHeader {
  uint32_t version = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensor> tensors;  // in file order
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // start of the data section in the file
};

// Limits that keep a hostile header from asking for absurd work; real files are far below them.
constexpr uint64_t kMaxGgufStringBytes = 64u << 20;
constexpr int kMaxGgufDims = 4;

// Parses and validates a GGUF image of `size` bytes; `label` (a path) goes into error messages.
GgufHeader parse_gguf(const uint8_t* bytes, size_t size, const std::string& label);

// A mapped, validated GGUF file with typed metadata reads and take()/finish() for its tensors,
// as WeightStore does for safetensors: a tensor nobody took is an error.
class GgufFile {
 public:
  explicit GgufFile(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const GgufHeader& header() const { return header_; }
  size_t file_bytes() const { return file_.size(); }

  bool has(const std::string& key) const { return header_.metadata.count(key) != 0; }
  const GgufValue& value(const std::string& key) const;  // throws naming the key when absent
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;  // any integer type, range-checked
  double get_float(const std::string& key) const;  // f32 or f64
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_strings(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;

  const GgufTensor* find(const std::string& name) const;
  const uint8_t* data(const GgufTensor& tensor) const {
    return file_.data() + header_.data_offset + tensor.offset;
  }
  // Dequantises tensor `name` into a new f32 buffer after checking its shape, and marks it taken.
  Buffer take_f32(const std::string& name, const Shape& shape);
  // Throws listing (up to 10) tensors nobody took.
  void finish() const;

 private:
  MappedFile file_;
  GgufHeader header_;
  std::map<std::string, size_t> index_;
  std::set<std::string> taken_;
};

// True for a path ending in ".gguf" or a file starting with the GGUF magic (the registry's test).
bool is_gguf_path(const std::string& path);

}  // namespace vt
