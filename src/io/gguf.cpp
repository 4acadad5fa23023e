// GGUF parsing: a bounds-checked cursor reads the header; counts and lengths are compared with
// the bytes left before any allocation, sizes are computed with overflow checks, and the data
// section must hold every tensor, aligned, in order, without overlap.
#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace vt {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;

class Reader {
 public:
  Reader(const uint8_t* bytes, size_t size, const std::string& label) : bytes_(bytes), size_(size), label_(label) {}
  size_t position() const { return position_; }
  size_t remaining() const { return size_ - position_; }

  template <typename T>
  T read(const std::string& what) {
    if (remaining() < sizeof(T))
      VT_FAIL(label_, ": truncated GGUF file: ", what, " at byte ", position_, " needs ", sizeof(T),
              " bytes, ", remaining(), " left");
    T value;
    std::memcpy(&value, bytes_ + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }

  std::string read_string(const std::string& what) {
    const uint64_t length = read<uint64_t>(what + " length");
    if (length > kMaxGgufStringBytes)
      VT_FAIL(label_, ": ", what, " at byte ", position_ - 8, " claims ", length, " bytes (limit ",
              kMaxGgufStringBytes, ")");
    if (length > remaining())
      VT_FAIL(label_, ": truncated GGUF file: ", what, " at byte ", position_ - 8, " claims ", length,
              " bytes, ", remaining(), " left");
    std::string text(reinterpret_cast<const char*>(bytes_ + position_), size_t(length));
    position_ += size_t(length);
    return text;
  }

 private:
  const uint8_t* bytes_;
  size_t size_;
  size_t position_ = 0;
  const std::string& label_;
};

// Bytes a value of this scalar type takes in the file (strings: their length field).
uint64_t min_value_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kBool: return 1;
    case GgufValueType::kU16: case GgufValueType::kI16: return 2;
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kF32: return 4;
    case GgufValueType::kU64: case GgufValueType::kI64: case GgufValueType::kF64: return 8;
    case GgufValueType::kString: return 8;
    case GgufValueType::kArray: return 12;
  }
  return 1;
}

bool value_type_from_u32(uint32_t value, GgufValueType* type) {
  if (value > uint32_t(GgufValueType::kF64)) return false;
  *type = GgufValueType(value);
  return true;
}

GgufValue::Scalar read_scalar(Reader& reader, GgufValueType type, const std::string& where) {
  switch (type) {
    case GgufValueType::kU8: return int64_t(reader.read<uint8_t>(where));
    case GgufValueType::kI8: return int64_t(reader.read<int8_t>(where));
    case GgufValueType::kU16: return int64_t(reader.read<uint16_t>(where));
    case GgufValueType::kI16: return int64_t(reader.read<int16_t>(where));
    case GgufValueType::kU32: return int64_t(reader.read<uint32_t>(where));
    case GgufValueType::kI32: return int64_t(reader.read<int32_t>(where));
    case GgufValueType::kU64: return reader.read<uint64_t>(where);
    case GgufValueType::kI64: return reader.read<int64_t>(where);
    case GgufValueType::kF32: return double(reader.read<float>(where));
    case GgufValueType::kF64: return reader.read<double>(where);
    case GgufValueType::kBool: {
      const uint8_t byte = reader.read<uint8_t>(where);
      VT_CHECK(byte <= 1, where, ": bool value ", int(byte), " is neither 0 nor 1");
      return byte == 1;
    }
    case GgufValueType::kString: return reader.read_string(where);
    case GgufValueType::kArray: break;
  }
  VT_FAIL(where, ": not a scalar type");
}

GgufValue read_value(Reader& reader, GgufValueType type, const std::string& where) {
  GgufValue value;
  value.type = type;
  if (type != GgufValueType::kArray) {
    value.scalar = read_scalar(reader, type, where);
    return value;
  }
  const uint32_t element = reader.read<uint32_t>(where + " array type");
  if (!value_type_from_u32(element, &value.element_type))
    VT_FAIL(where, ": unknown array element type ", element);
  VT_CHECK(value.element_type != GgufValueType::kArray, where, ": arrays of arrays are not supported");
  const uint64_t count = reader.read<uint64_t>(where + " array length");
  // Checked before reserving: every element takes at least this many bytes of the file.
  if (count > reader.remaining() / min_value_bytes(value.element_type))
    VT_FAIL(where, ": array of ", count, " ", gguf_value_type_name(value.element_type),
            " values cannot fit in the ", reader.remaining(), " bytes left (truncated or corrupt file)");
  value.array.reserve(size_t(count));
  for (uint64_t i = 0; i < count; ++i) value.array.push_back(read_scalar(reader, value.element_type, where));
  return value;
}

uint64_t align_up(uint64_t value, uint64_t alignment) {
  return value + (alignment - value % alignment) % alignment;
}

std::string describe_dims(const std::vector<uint64_t>& dims) {
  std::ostringstream text;
  text << "[";
  for (size_t i = 0; i < dims.size(); ++i) text << (i ? ", " : "") << dims[i];
  text << "]";
  return text.str();
}

GgufTensor read_tensor_info(Reader& reader, const std::string& label, uint64_t index) {
  GgufTensor tensor;
  tensor.name = reader.read_string(label + ": tensor " + std::to_string(index) + " name");
  VT_CHECK(!tensor.name.empty(), label, ": tensor ", index, " has an empty name");
  const std::string where = label + ": tensor '" + tensor.name + "'";
  const uint32_t rank = reader.read<uint32_t>(where + " n_dims");
  VT_CHECK(rank >= 1 && rank <= uint32_t(kMaxGgufDims), where, ": n_dims ", rank, " is not in [1, ",
           kMaxGgufDims, "]");
  std::vector<uint64_t> dims(rank);  // ne[0] first: the fastest-varying dimension
  for (uint32_t i = 0; i < rank; ++i) dims[i] = reader.read<uint64_t>(where + " dimension");
  const uint32_t type_value = reader.read<uint32_t>(where + " type");
  if (!ggml_type_from_u32(type_value, &tensor.type)) VT_FAIL(where, ": unknown ggml type ", type_value);
  tensor.offset = reader.read<uint64_t>(where + " offset");

  const GgmlTypeInfo& info = ggml_type_info(tensor.type);
  // Element count with an overflow check: it has to fit in the file anyway.
  uint64_t count = 1;
  for (uint64_t d : dims) {
    if (d > uint64_t(std::numeric_limits<int64_t>::max()) || (d != 0 && count > (uint64_t(1) << 62) / d))
      VT_FAIL(where, ": shape ", describe_dims(dims), " overflows");
    count *= d;
  }
  VT_CHECK(dims[0] % info.block_size == 0, where, ": row length ", dims[0], " is not a multiple of the ",
           info.name, " block size ", info.block_size);
  const uint64_t blocks = count / info.block_size;
  VT_CHECK(blocks <= std::numeric_limits<uint64_t>::max() / info.block_bytes, where, ": size overflows");
  tensor.bytes = blocks * info.block_bytes;
  std::vector<int64_t> shape(dims.rbegin(), dims.rend());
  tensor.shape = Shape(shape);
  return tensor;
}

}  // namespace

std::string_view gguf_value_type_name(GgufValueType type) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(type) <= uint32_t(GgufValueType::kF64) ? kNames[uint32_t(type)] : "unknown";
}

GgufHeader parse_gguf(const uint8_t* bytes, size_t size, const std::string& label) {
  Reader reader(bytes, size, label);
  if (size < 4 || reader.read<uint32_t>("magic") != kMagic) VT_FAIL(label, ": not a GGUF file (no 'GGUF' magic)");
  GgufHeader header;
  header.version = reader.read<uint32_t>("version");
  VT_CHECK(header.version == 2 || header.version == 3, label, ": GGUF version ", header.version,
           " is not supported (2 and 3 are)");
  const uint64_t tensor_count = reader.read<uint64_t>("tensor count");
  const uint64_t kv_count = reader.read<uint64_t>("metadata count");
  // Each key-value takes at least 13 bytes and each tensor info at least 32.
  VT_CHECK(kv_count <= reader.remaining() / 13, label, ": ", kv_count, " metadata entries cannot fit in the ",
           reader.remaining(), " bytes left (truncated or corrupt file)");
  VT_CHECK(tensor_count <= reader.remaining() / 32, label, ": ", tensor_count, " tensors cannot fit in the ",
           reader.remaining(), " bytes left (truncated or corrupt file)");

  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = reader.read_string(label + ": metadata key " + std::to_string(i));
    VT_CHECK(!key.empty(), label, ": metadata key ", i, " is empty");
    const std::string where = label + ": metadata '" + key + "'";
    const uint32_t type_value = reader.read<uint32_t>(where + " type");
    GgufValueType type;
    if (!value_type_from_u32(type_value, &type)) VT_FAIL(where, ": unknown value type ", type_value);
    GgufValue value = read_value(reader, type, where);
    VT_CHECK(!header.metadata.count(key), where, ": key appears twice");
    header.metadata.emplace(std::move(key), std::move(value));
  }

  if (auto it = header.metadata.find("general.alignment"); it != header.metadata.end()) {
    VT_CHECK(it->second.type == GgufValueType::kU32, label, ": general.alignment must be a u32");
    const int64_t alignment = std::get<int64_t>(it->second.scalar);
    VT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, label, ": general.alignment ", alignment,
             " is not a power of two");
    header.alignment = uint64_t(alignment);
  } else {
    header.alignment = kDefaultAlignment;
  }

  std::map<std::string, size_t> seen;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor tensor = read_tensor_info(reader, label, i);
    VT_CHECK(!seen.count(tensor.name), label, ": tensor '", tensor.name, "' appears twice");
    seen[tensor.name] = header.tensors.size();
    header.tensors.push_back(std::move(tensor));
  }

  header.data_offset = align_up(reader.position(), header.alignment);
  if (header.tensors.empty()) return header;
  VT_CHECK(header.data_offset <= size, label, ": truncated GGUF file: the data section would start at byte ",
           header.data_offset, " of ", size);
  const uint64_t data_bytes = size - header.data_offset;
  std::vector<const GgufTensor*> by_offset;
  for (const auto& tensor : header.tensors) {
    const std::string where = label + ": tensor '" + tensor.name + "'";
    VT_CHECK(tensor.offset % header.alignment == 0, where, ": offset ", tensor.offset,
             " is not a multiple of the alignment ", header.alignment);
    if (tensor.offset > data_bytes || tensor.bytes > data_bytes - tensor.offset)
      VT_FAIL(where, ": data [", tensor.offset, ", +", tensor.bytes, ") runs past the ", data_bytes,
              " bytes of the data section; file truncated?");
    by_offset.push_back(&tensor);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  // Tensors are packed in offset order, each at the next aligned position after the previous.
  uint64_t cursor = 0;
  for (const GgufTensor* tensor : by_offset) {
    if (tensor->offset < cursor)
      VT_FAIL(label, ": tensor '", tensor->name, "' data at ", tensor->offset, " overlaps the previous tensor (ends at ",
              cursor, ")");
    if (tensor->offset != align_up(cursor, header.alignment))
      VT_FAIL(label, ": gap in the data section before tensor '", tensor->name, "' (bytes ", cursor, " to ",
              tensor->offset, " unused)");
    cursor = tensor->offset + tensor->bytes;
  }
  if (data_bytes - cursor >= header.alignment)
    VT_FAIL(label, ": ", data_bytes - cursor, " bytes after the last tensor's data are not covered by any tensor");
  return header;
}

GgufFile::GgufFile(const std::string& path) : file_(path) {
  header_ = parse_gguf(file_.data(), file_.size(), path);
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_[header_.tensors[i].name] = i;
}

const GgufValue& GgufFile::value(const std::string& key) const {
  auto it = header_.metadata.find(key);
  if (it == header_.metadata.end()) VT_FAIL(path(), ": GGUF metadata has no '", key, "'");
  return it->second;
}

namespace {

int64_t scalar_int(const GgufValue::Scalar& scalar, const std::string& where) {
  if (const auto* value = std::get_if<int64_t>(&scalar)) return *value;
  if (const auto* value = std::get_if<uint64_t>(&scalar)) {
    VT_CHECK(*value <= uint64_t(std::numeric_limits<int64_t>::max()), where, ": ", *value, " is too large");
    return int64_t(*value);
  }
  VT_FAIL(where, " must be an integer");
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = value(key);
  VT_CHECK(v.type == GgufValueType::kString, path(), ": GGUF metadata '", key, "' must be a string, is ",
           gguf_value_type_name(v.type));
  return std::get<std::string>(v.scalar);
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = value(key);
  VT_CHECK(v.type != GgufValueType::kArray, path(), ": GGUF metadata '", key, "' must be an integer, is an array");
  return scalar_int(v.scalar, path() + ": GGUF metadata '" + key + "'");
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = value(key);
  VT_CHECK(v.type == GgufValueType::kF32 || v.type == GgufValueType::kF64, path(), ": GGUF metadata '", key,
           "' must be a float, is ", gguf_value_type_name(v.type));
  return std::get<double>(v.scalar);
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = value(key);
  VT_CHECK(v.type == GgufValueType::kBool, path(), ": GGUF metadata '", key, "' must be a bool, is ",
           gguf_value_type_name(v.type));
  return std::get<bool>(v.scalar);
}

std::vector<std::string> GgufFile::get_strings(const std::string& key) const {
  const GgufValue& v = value(key);
  VT_CHECK(v.type == GgufValueType::kArray && v.element_type == GgufValueType::kString, path(),
           ": GGUF metadata '", key, "' must be an array of strings");
  std::vector<std::string> out;
  out.reserve(v.array.size());
  for (const auto& item : v.array) out.push_back(std::get<std::string>(item));
  return out;
}

std::vector<int64_t> GgufFile::get_ints(const std::string& key) const {
  const GgufValue& v = value(key);
  VT_CHECK(v.type == GgufValueType::kArray, path(), ": GGUF metadata '", key, "' must be an array");
  std::vector<int64_t> out;
  out.reserve(v.array.size());
  for (const auto& item : v.array) out.push_back(scalar_int(item, path() + ": GGUF metadata '" + key + "'"));
  return out;
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

Buffer GgufFile::take_f32(const std::string& name, const Shape& shape) {
  const GgufTensor* tensor = find(name);
  if (!tensor) VT_FAIL(path(), ": missing tensor '", name, "' (expected shape ", shape.str(), ")");
  if (tensor->shape != shape)
    VT_FAIL(path(), ": tensor '", name, "' has shape ", tensor->shape.str(), " but the metadata implies ",
            shape.str());
  Buffer out(DType::kF32, shape);
  try {
    dequantize_to_f32(out.f32(), data(*tensor), tensor->type, tensor->shape.numel());
  } catch (const Error& error) {
    VT_FAIL(path(), ": tensor '", name, "': ", error.what());
  }
  taken_.insert(name);
  return out;
}

void GgufFile::finish() const {
  std::vector<std::string> left;
  for (const auto& tensor : header_.tensors)
    if (!taken_.count(tensor.name)) left.push_back(tensor.name);
  if (left.empty()) return;
  std::ostringstream message;
  message << path() << ": " << left.size() << " GGUF tensor(s) not consumed by the model: ";
  for (size_t i = 0; i < left.size() && i < 10; ++i) message << (i ? ", " : "") << "'" << left[i] << "'";
  if (left.size() > 10) message << ", ...";
  VT_FAIL(message.str());
}

bool is_gguf_path(const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return true;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in && in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace vt
