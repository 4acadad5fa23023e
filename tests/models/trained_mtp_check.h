// One row of an MTP head's logits against a row of the training script's PyTorch head
// (mtp_reference.json: top-16 ids and logits): every recorded logit within kRealModelLogitAbs, and
// the argmax where the reference's top-1 leads by more than twice the bound (it cannot swap with
// any logit within the bound). Shared by the CPU (tests/models) and CUDA (tests/cuda) tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "../numerics.h"

namespace vt::testing {

struct MtpRowCheck {
  double worst = 0;  // max |vt - reference| over the recorded logits
  int argmax_checked = 0;
};

inline void check_mtp_row(const float* logits, int64_t vocab, const nlohmann::json& want, MtpRowCheck& check) {
  const auto ids = want["ids"].get<std::vector<int32_t>>();
  const auto values = want["logits"].get<std::vector<double>>();
  for (size_t i = 0; i < ids.size(); ++i) {
    const double diff = std::abs(double(logits[ids[i]]) - values[i]);
    check.worst = std::max(check.worst, diff);
    EXPECT_LE(diff, numerics::kRealModelLogitAbs) << "token " << ids[i];
  }
  if (values[0] - values[1] > 2 * numerics::kRealModelLogitAbs) {
    EXPECT_EQ(int32_t(std::max_element(logits, logits + vocab) - logits), ids[0]);
    ++check.argmax_checked;
  }
}

}  // namespace vt::testing
