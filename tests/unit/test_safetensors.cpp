// Strict safetensors validation: each corruption gets a clear error naming file and tensor.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "io/safetensors.h"
#include "safetensors_writer.h"

namespace vt {
namespace {

using testing::safetensors_image;

// Expects parse to throw an Error whose message contains every fragment.
void expect_error(const std::string& image, std::initializer_list<std::string> fragments) {
  try {
    parse_safetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "bad.safetensors");
    FAIL() << "no error for an invalid file";
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("bad.safetensors"), std::string::npos) << message;
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

const std::string kTwoTensors =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}})";

TEST(Safetensors, ParsesAValidFile) {
  std::string image = safetensors_image(kTwoTensors, std::string(16, '\x01'));
  auto header = parse_safetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "ok");
  ASSERT_EQ(header.tensors.size(), 2u);
  EXPECT_EQ(header.tensors[1].name, "b");
  EXPECT_EQ(header.tensors[1].shape, (Shape{2, 2}));
  EXPECT_EQ(header.data_offset, 8 + kTwoTensors.size());
}

TEST(Safetensors, MetadataAndEmptyTensorsAreAccepted) {
  std::string header =
      R"({"__metadata__":{"format":"pt"},"e":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  std::string image = safetensors_image(header, "z");
  auto parsed = parse_safetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "ok");
  EXPECT_EQ(parsed.metadata.at("format"), "pt");
}

TEST(Safetensors, TruncatedFile) { expect_error("abc", {"truncated"}); }

TEST(Safetensors, HeaderLengthPast100MB) {
  expect_error(safetensors_image("{}", "", uint64_t(200) << 20), {"100 MB"});
}

TEST(Safetensors, HeaderLengthPastTheFile) { expect_error(safetensors_image("{}", "", 1000), {"past the end"}); }

TEST(Safetensors, HeaderNotUtf8) { expect_error(safetensors_image("{\"\xff\":1}", ""), {"UTF-8"}); }

TEST(Safetensors, HeaderNotJson) { expect_error(safetensors_image("{not json", ""), {"not valid JSON"}); }

TEST(Safetensors, HeaderNotAnObject) { expect_error(safetensors_image("[1,2]", ""), {"JSON object"}); }

TEST(Safetensors, UnknownDtype) {
  expect_error(safetensors_image(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", "x"),
               {"'w'", "unknown dtype 'F4'"});
}

TEST(Safetensors, OverflowingShape) {
  expect_error(safetensors_image(
                   R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", "xxxx"),
               {"'w'", "overflows"});
}

TEST(Safetensors, ShapeLargerThanTheData) {
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","shape":[1000],"data_offsets":[0,4]}})", "xxxx"),
               {"'w'", "needs 4000 bytes"});
}

TEST(Safetensors, SpanDisagreesWithShape) {
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxxxxxx"),
               {"'w'", "span"});
}

TEST(Safetensors, OffsetsPastTheData) {
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "xxxx"),
               {"'w'", "past the data section"});
}

TEST(Safetensors, OverlappingOffsets) {
  expect_error(safetensors_image(
                   R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   std::string(8, 'x')),
               {"'b'", "overlaps"});
}

TEST(Safetensors, GapBetweenTensors) {
  expect_error(safetensors_image(
                   R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                   std::string(12, 'x')),
               {"'b'", "gap"});
}

TEST(Safetensors, TrailingBytesNotCovered) {
  expect_error(safetensors_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(8, 'x')),
               {"cover"});
}

TEST(Safetensors, NegativeOrNonIntegerFields) {
  expect_error(safetensors_image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "xxxx"), {"'a'"});
  expect_error(safetensors_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "xxxx"), {"'a'"});
  expect_error(safetensors_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4.5]}})", "xxxx"), {"'a'"});
  expect_error(safetensors_image(R"({"a":"F32"})", ""), {"'a'"});
}

TEST(Safetensors, MissingFileIsAnError) {
  EXPECT_THROW(SafetensorsFile("/nonexistent/model.safetensors"), Error);
}

}  // namespace
}  // namespace vt
