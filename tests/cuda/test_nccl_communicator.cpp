// The NCCL communicator on the GPU: a one-rank world on one device (sum = the input, eagerly and
// inside a CUDA graph), and a two-rank world on two devices where present. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cuda/check.h"
#include "cuda/device_buffer.h"
#include "cuda_test_support.h"
#include "parallel/nccl_communicator.h"

namespace vt {
namespace {

class NcclCommunicatorTest : public testing::GpuTest {};

std::vector<float> ramp(size_t count, float scale) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = scale * (float(i % 97) - 48.0f) / 7.0f;
  return values;
}

std::vector<float> to_host(const cuda::DeviceBuffer& buffer) {
  std::vector<float> host(size_t(buffer.view().numel()));
  VT_CUDA_CHECK(cudaMemcpy(host.data(), buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

TEST_F(NcclCommunicatorTest, OneRankAllReduceOnOneDeviceWithNvlsOff) {
  setenv("NCCL_NVLS_ENABLE", "1", 1);  // the communicator must turn it off whatever was set
  NcclCommunicator communicator(NcclCommunicator::make_unique_id(), 1, 0, 0);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  EXPECT_EQ(communicator.world_size(), 1);

  const std::vector<float> values = ramp(4099, 1.0f);  // odd size: no alignment assumed
  cuda::DeviceBuffer buffer = cuda::to_device(TensorView{
      const_cast<float*>(values.data()), DType::kF32, Device::kCpu, {int64_t(values.size())}});
  cudaStream_t stream;
  VT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  communicator.all_reduce_sum(buffer, stream);
  VT_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(to_host(buffer), values);  // a sum over one rank is the rank's own tensor

  // The collective is captured in a graph as decode steps will be, and replays.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  VT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  communicator.all_reduce_sum(buffer, stream);
  VT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  VT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) VT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  VT_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(to_host(buffer), values);
  VT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  VT_CUDA_CHECK(cudaGraphDestroy(graph));
  VT_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Checked before NCCL or CUDA is called: runs without a GPU too.
TEST(NcclCommunicator, RanksOutsideTheWorldAreRefused) {
  const NcclCommunicator::UniqueId id{};
  for (auto [world, rank, fragment] : {std::tuple{2, 2, "rank 2 outside the world of 2"},
                                       std::tuple{2, -1, "rank -1 outside the world of 2"},
                                       std::tuple{0, 0, "world size 0 must be at least 1"}}) {
    try {
      NcclCommunicator communicator(id, world, rank, 0);
      ADD_FAILURE() << "rank " << rank << " of " << world << " accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  }
}

TEST_F(NcclCommunicatorTest, HostBuffersAreRefused) {
  NcclCommunicator communicator(NcclCommunicator::make_unique_id(), 1, 0, 0);
  std::vector<float> host(16);
  try {
    communicator.all_reduce_sum(TensorView{host.data(), DType::kF32, Device::kCpu, {16}}, nullptr);
    ADD_FAILURE() << "a host buffer was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("must be in device memory"), std::string::npos)
        << error.what();
  }
}

// Two ranks, one thread and one GPU each (the single-process layout of `--tensor-parallel 2`).
TEST_F(NcclCommunicatorTest, TwoRanksOnTwoDevicesSum) {
  int devices = 0;
  VT_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) GTEST_SKIP() << "needs two GPUs, " << devices << " visible";
  const NcclCommunicator::UniqueId id = NcclCommunicator::make_unique_id();
  const size_t count = 1 << 20;
  std::vector<std::vector<float>> results(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.emplace_back([&, rank] {
      try {
        NcclCommunicator communicator(id, 2, rank, rank);
        std::vector<float> values = ramp(count, float(rank + 1));
        cuda::DeviceBuffer buffer =
            cuda::to_device(TensorView{values.data(), DType::kF32, Device::kCpu, {int64_t(count)}});
        cudaStream_t stream;
        VT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        communicator.all_reduce_sum(buffer, stream);
        VT_CUDA_CHECK(cudaStreamSynchronize(stream));
        results[size_t(rank)] = to_host(buffer);
        VT_CUDA_CHECK(cudaStreamDestroy(stream));
      } catch (const std::exception& error) {
        errors[size_t(rank)] = error.what();
      }
    });
  for (auto& rank : ranks) rank.join();
  ASSERT_EQ(errors, std::vector<std::string>(2)) << errors[0] << " / " << errors[1];
  const std::vector<float> one = ramp(count, 1.0f), two = ramp(count, 2.0f);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(results[0][i], one[i] + two[i]) << i;
    ASSERT_EQ(results[1][i], results[0][i]) << i;
  }
}

}  // namespace
}  // namespace vt
