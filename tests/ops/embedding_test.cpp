// The embedding CPU reference (ops/embedding/embedding_cpu.cpp): ids outside the table are refused.
#include <gtest/gtest.h>

#include "core/error.h"
#include "ops/ops.h"
#include "op_test_support.h"

namespace vt {
namespace {

using testing::random;

TEST(Embedding, EmbeddingRejectsOutOfRangeIds) {
  Buffer table = random({4, 3}, 1), ids(DType::kI32, {1}), out(DType::kF32, {1, 3});
  ids.view().as<int32_t>()[0] = 4;
  EXPECT_THROW(ops::embedding(out, ids, table), Error);
}

}  // namespace
}  // namespace vt
