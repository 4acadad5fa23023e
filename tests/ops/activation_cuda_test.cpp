// The SwiGLU kernel (ops/activation/activation.cu) against the CPU reference, and its launch
// intent against what CUPTI recorded (what the kernel-ran gate relies on).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/device.h"
#include "op_cuda_test_support.h"
#include "ops/activation/activation.h"
#include "profile/kernel_recorder.h"
#include "trace/intent.h"

namespace vt {
namespace {

using testing::relative_l2;
using testing::random_vector;
using testing::DeviceVector;

class ActivationCuda : public testing::GpuTest {};

TEST_F(ActivationCuda, SiluMulMatchesCpu) {
  const int64_t rows = 9, n = 17408;
  auto gate_up = random_vector(rows * 2 * n, 3);
  std::vector<float> expected(rows * n);
  cpu::silu_mul(expected.data(), gate_up.data(), rows, n);
  DeviceVector d_in(gate_up), d_out(rows * n);
  cuda::silu_mul_f32(d_out.data, d_in.data, rows, n, nullptr);
  cuda::synchronize();
  EXPECT_LE(relative_l2(d_out.to_host(), expected), 1e-6);
}

// The launcher's intent and CUPTI's record name the same kernel, once per launch; a window in
// which nothing launches records nothing (what the kernel-ran gate relies on).
TEST_F(ActivationCuda, IntentsMatchWhatCuptiRecorded) {
  const int64_t rows = 4, n = 1000;
  DeviceVector in(random_vector(rows * 2 * n, 5)), out(rows * n);
  profile::KernelRecorder recorder;
  recorder.start();
  trace::begin_intents();
  cuda::silu_mul_f32(out.data, in.data, rows, n, nullptr);
  cuda::silu_mul_f32(out.data, in.data, rows, n, nullptr);
  const auto intents = trace::end_intents();
  cuda::synchronize();
  const auto records = recorder.stop();
  ASSERT_EQ(intents.size(), 1u);
  EXPECT_EQ(intents.begin()->first, "sm90_silu_mul");
  EXPECT_EQ(intents.begin()->second, 2);
  int ran = 0;
  for (const auto& record : records) ran += record.name.find("sm90_silu_mul") != std::string::npos;
  EXPECT_EQ(ran, 2);
  recorder.start();
  EXPECT_TRUE(recorder.stop().empty());
}

}  // namespace
}  // namespace vt
