// Strict GGUF validation (each corruption a clear error naming file and field) and
// dequantisation of every supported ggml type against gguf-py (tests/golden/gguf/quants.gguf).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "io/gguf.h"
#include "gguf_writer.h"

namespace vt {
namespace {

using namespace vt::testing;

constexpr uint32_t kF32 = 0, kQ8_0 = 8;

GgufHeader parse(const std::string& image) {
  return parse_gguf(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "bad.gguf");
}

// Expects parse to throw an Error whose message names the file and contains every fragment.
void expect_error(const std::string& image, std::initializer_list<std::string> fragments) {
  try {
    parse(image);
    FAIL() << "no error for an invalid file";
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("bad.gguf"), std::string::npos) << message;
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

// Two tensors: f32 [2, 3] at 0 (24 bytes) and q8_0 [1, 32] at 32 (34 bytes), 8 bytes of padding.
GgufBuilder valid_builder() {
  GgufBuilder builder;
  builder.metadata = {kv_string("general.architecture", "llama"), kv_u32("llama.block_count", 30),
                      kv_f32("llama.rope.freq_base", 100000.0f), kv_strings("tokenizer.ggml.tokens", {"a", "b", "ab"})};
  builder.tensors = {tensor_info("w", {3, 2}, kF32, 0), tensor_info("q", {32, 1}, kQ8_0, 32)};
  builder.data = std::string(24, '\x01') + std::string(8, '\0') + std::string(34, '\x02');
  return builder;
}

TEST(Gguf, ParsesAValidFile) {
  GgufHeader header = parse(valid_builder().build());
  EXPECT_EQ(header.version, 3u);
  ASSERT_EQ(header.tensors.size(), 2u);
  EXPECT_EQ(header.tensors[0].shape, (Shape{2, 3}));  // GGUF's ne[] reversed: [rows, cols]
  EXPECT_EQ(header.tensors[0].bytes, 24u);
  EXPECT_EQ(header.tensors[1].shape, (Shape{1, 32}));
  EXPECT_EQ(header.tensors[1].bytes, 34u);
  EXPECT_EQ(header.tensors[1].offset, 32u);
  EXPECT_EQ(header.data_offset % 32, 0u);
  EXPECT_EQ(std::get<std::string>(header.metadata.at("general.architecture").scalar), "llama");
  EXPECT_EQ(std::get<int64_t>(header.metadata.at("llama.block_count").scalar), 30);
  EXPECT_EQ(header.metadata.at("tokenizer.ggml.tokens").array.size(), 3u);
}

TEST(Gguf, EveryTruncationIsAnError) {
  const std::string image = valid_builder().build();
  for (size_t length = 0; length < image.size(); ++length) {
    SCOPED_TRACE(length);
    EXPECT_THROW(parse(image.substr(0, length)), Error);
  }
}

TEST(Gguf, BadMagicAndVersion) {
  expect_error("GGML" + valid_builder().build().substr(4), {"not a GGUF file"});
  GgufBuilder builder = valid_builder();
  builder.version = 1;
  expect_error(builder.build(), {"version 1"});
  builder.version = 4;
  expect_error(builder.build(), {"version 4"});
}

TEST(Gguf, CountsLargerThanTheFile) {
  GgufBuilder builder = valid_builder();
  builder.kv_count = int64_t(1) << 40;
  expect_error(builder.build(), {"metadata entries cannot fit"});
  builder = valid_builder();
  builder.tensor_count = int64_t(1) << 60;
  expect_error(builder.build(), {"tensors cannot fit"});
}

TEST(Gguf, StringAndArrayLengthsLargerThanTheFile) {
  GgufBuilder builder = valid_builder();
  std::string key;
  put_u64(key, uint64_t(1) << 62);  // a key that claims 2^62 bytes
  builder.metadata = {key};
  expect_error(builder.build(), {"metadata key 0", "claims"});

  builder = valid_builder();
  std::string array;
  put_string(array, "tokenizer.ggml.merges");
  put_u32(array, 9);
  put_u32(array, 8);
  put_u64(array, uint64_t(1) << 61);  // 2^61 strings
  builder.metadata = {array};
  expect_error(builder.build(), {"'tokenizer.ggml.merges'", "cannot fit"});
}

TEST(Gguf, BadValueTypes) {
  GgufBuilder builder = valid_builder();
  std::string entry;
  put_string(entry, "x");
  put_u32(entry, 13);  // no such type
  put_u32(entry, 0);
  builder.metadata = {entry};
  expect_error(builder.build(), {"'x'", "unknown value type 13"});

  entry.clear();
  put_string(entry, "nested");
  put_u32(entry, 9);
  put_u32(entry, 9);  // array of arrays
  put_u64(entry, 1);
  builder.metadata = {entry};
  expect_error(builder.build(), {"'nested'", "arrays of arrays"});

  entry.clear();
  put_string(entry, "flag");
  put_u32(entry, 7);
  entry += '\x02';  // a bool of 2
  builder.metadata = {entry};
  expect_error(builder.build(), {"'flag'", "neither 0 nor 1"});
}

TEST(Gguf, DuplicateKeysAndTensors) {
  GgufBuilder builder = valid_builder();
  builder.metadata.push_back(kv_u32("llama.block_count", 2));
  expect_error(builder.build(), {"'llama.block_count'", "twice"});
  builder = valid_builder();
  builder.tensors[1] = tensor_info("w", {32, 1}, kQ8_0, 32);
  expect_error(builder.build(), {"'w'", "twice"});
}

TEST(Gguf, Alignment) {
  GgufBuilder builder = valid_builder();
  builder.metadata.push_back(kv_u32("general.alignment", 48));
  expect_error(builder.build(), {"power of two"});
  builder = valid_builder();
  builder.metadata.push_back(kv_string("general.alignment", "32"));
  expect_error(builder.build(), {"general.alignment must be a u32"});
  // A valid non-default alignment moves the data section and the tensors.
  builder = valid_builder();
  builder.metadata.push_back(kv_u32("general.alignment", 64));
  builder.alignment = 64;
  builder.tensors = {tensor_info("w", {3, 2}, kF32, 0), tensor_info("q", {32, 1}, kQ8_0, 64)};
  builder.data = std::string(24, '\x01') + std::string(40, '\0') + std::string(34, '\x02');
  GgufHeader header = parse(builder.build());
  EXPECT_EQ(header.alignment, 64u);
  EXPECT_EQ(header.data_offset % 64, 0u);
}

TEST(Gguf, BadTensorInfos) {
  auto with_tensor = [](const std::string& info) {
    GgufBuilder builder = valid_builder();
    builder.tensors = {info};
    builder.data = std::string(32, '\0');
    return builder.build();
  };
  expect_error(with_tensor(tensor_info("t", {}, kF32, 0)), {"'t'", "n_dims 0"});
  expect_error(with_tensor(tensor_info("t", {1, 1, 1, 1, 1}, kF32, 0)), {"'t'", "n_dims 5"});
  expect_error(with_tensor(tensor_info("t", {uint64_t(1) << 40, uint64_t(1) << 40}, kF32, 0)), {"'t'", "overflows"});
  expect_error(with_tensor(tensor_info("t", {uint64_t(-1)}, kF32, 0)), {"'t'", "overflows"});
  expect_error(with_tensor(tensor_info("t", {33}, kQ8_0, 0)), {"'t'", "not a multiple of the Q8_0 block size 32"});
  expect_error(with_tensor(tensor_info("t", {8}, 99, 0)), {"'t'", "unknown ggml type 99"});
  expect_error(with_tensor(tensor_info("", {8}, kF32, 0)), {"empty name"});
  expect_error(with_tensor(tensor_info("t", {4}, kF32, 4)), {"'t'", "not a multiple of the alignment"});
  expect_error(with_tensor(tensor_info("t", {1000}, kF32, 0)), {"'t'", "runs past", "truncated"});
  expect_error(with_tensor(tensor_info("t", {8}, kF32, uint64_t(1) << 63)), {"'t'", "runs past"});
}

TEST(Gguf, DataLayout) {
  GgufBuilder builder = valid_builder();
  builder.tensors[1] = tensor_info("q", {32, 1}, kQ8_0, 0);  // both at 0
  expect_error(builder.build(), {"overlaps"});
  builder = valid_builder();
  builder.tensors[1] = tensor_info("q", {32, 1}, kQ8_0, 64);
  builder.data += std::string(32, '\0');
  expect_error(builder.build(), {"'q'", "gap"});
  builder = valid_builder();
  builder.data += std::string(40, '\0');
  expect_error(builder.build(), {"not covered by any tensor"});
  builder = valid_builder();
  builder.data += std::string(30, '\0');  // padding after the last tensor is allowed
  EXPECT_NO_THROW(parse(builder.build()));
}

const std::string kFixtures = std::string(VT_SOURCE_DIR) + "/tests/golden/gguf/";

TEST(Gguf, TypedMetadataReads) {
  GgufFile file(kFixtures + "tiny_llama.gguf");
  EXPECT_EQ(file.get_string("general.architecture"), "llama");
  EXPECT_EQ(file.get_int("llama.block_count"), 2);
  EXPECT_FLOAT_EQ(float(file.get_float("llama.rope.freq_base")), 50000.0f);
  try {
    file.get_int("general.architecture");
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'general.architecture' must be an integer"), std::string::npos);
  }
  try {
    file.get_string("llama.no_such_key");
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no 'llama.no_such_key'"), std::string::npos);
  }
}

// Every supported type against gguf-py's dequantisation of the same random blocks.
TEST(Gguf, DequantisationMatchesGgufPy) {
  GgufFile file(kFixtures + "quants.gguf");
  for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k", "f16", "f32"}) {
    SCOPED_TRACE(name);
    const GgufTensor* tensor = file.find(name);
    ASSERT_NE(tensor, nullptr);
    Buffer expected = file.take_f32(std::string(name) + ".expected", tensor->shape);
    Buffer actual = file.take_f32(name, tensor->shape);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < actual.numel(); ++i) {
      worst = std::max(worst, std::abs(double(actual.f32()[i]) - expected.f32()[i]));
      scale = std::max(scale, std::abs(double(expected.f32()[i])));
    }
    EXPECT_GT(scale, 0.0);
    // Same float32 operations, possibly in a different order: a few ulps at most.
    EXPECT_LE(worst, 1e-6 * scale) << "max |difference| " << worst;
  }
  EXPECT_NO_THROW(file.finish());
}

TEST(Gguf, TakeChecksShapeAndFinishListsLeftovers) {
  GgufFile file(kFixtures + "quants.gguf");
  EXPECT_THROW(file.take_f32("q4_0", {2, 64}), Error);
  EXPECT_THROW(file.take_f32("absent", {1}), Error);
  file.take_f32("f32", file.find("f32")->shape);
  try {
    file.finish();
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("not consumed"), std::string::npos) << error.what();
  }
}

TEST(Gguf, UnsupportedTypeIsNamed) {
  std::vector<float> out(256);
  std::vector<uint8_t> block(84);
  try {
    dequantize_to_f32(out.data(), block.data(), GgmlType::kQ2_K, 256);
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("Q2_K cannot be dequantised"), std::string::npos) << error.what();
  }
}

TEST(Gguf, MissingFileAndNotGguf) {
  EXPECT_THROW(GgufFile("/nonexistent/model.gguf"), Error);
  EXPECT_THROW(GgufFile(std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_dense/config.json"), Error);
}

}  // namespace
}  // namespace vt
