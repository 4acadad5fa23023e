// The MoE kernels (ops/moe/moe_route.cu, moe.cu) against their CPU references (moe_cpu.cpp): the
// router and its expert-grouped layout (bit-exact), the grouped expert GEMV (FP8 and dense) and the
// combine, at awkward sizes (1, 7, 64, 129 tokens: the fused and the two-kernel router; experts
// chosen by every token, by one, by none), the shared expert folded in as expert E, and
// bit-identical reruns.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "../numerics.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "op_cuda_test_support.h"
#include "ops/moe/moe.h"

namespace vt {
namespace {

using testing::download;
using testing::download_as_f32;
using testing::download_bytes;
using testing::random_vector;
using testing::relative_l2;
using testing::upload;
using testing::upload_as;

class MoeCuda : public testing::GpuTest {};

constexpr int64_t kTokenCounts[] = {1, 3, 7, 64, 129};  // 3: the widest step routed by one warp

// A routing on the device (its words and weights) and its host copy.
struct DeviceRouting {
  DeviceRouting(int64_t tokens, int64_t experts, int64_t top_k)
      : tokens(tokens),
        experts(experts),
        top_k(top_k),
        words(DType::kI32, {moe_routing_words(tokens, experts, top_k)}),
        weights(DType::kF32, {tokens * top_k}),
        routing(moe_routing_in(words.as<int32_t>(), weights.as<float>(), tokens, experts, top_k)) {}
  // The device's words, and a host routing pointing into `host` (which it resizes).
  MoeRouting download_into(std::vector<int32_t>& host) const {
    host.resize(size_t(words.shape().numel()));
    cuda::copy_to_host(host.data(), words.data(), host.size() * sizeof(int32_t));
    return moe_routing_in(host.data(), nullptr, tokens, experts, top_k);
  }
  int64_t tokens, experts, top_k;
  cuda::DeviceBuffer words, weights;
  MoeRouting routing;
};

// Expects the device's grouped layout to be the CPU's for the device's own ids.
void expect_layout_matches_cpu(const DeviceRouting& device, const std::string& what) {
  std::vector<int32_t> got_words, expected_words;
  const MoeRouting got = device.download_into(got_words);
  expected_words = got_words;
  const MoeRouting expected =
      moe_routing_in(expected_words.data(), nullptr, device.tokens, device.experts, device.top_k);
  cpu::moe_group(expected, device.tokens, device.experts, device.top_k);
  const int64_t pairs = device.tokens * device.top_k;
  ASSERT_EQ(*got.active_count, *expected.active_count) << what;
  EXPECT_EQ(
      std::vector<int32_t>(got.expert_offsets, got.expert_offsets + device.experts + 1),
      std::vector<int32_t>(expected.expert_offsets, expected.expert_offsets + device.experts + 1))
      << what;
  EXPECT_EQ(std::vector<int32_t>(got.sorted_pairs, got.sorted_pairs + pairs),
            std::vector<int32_t>(expected.sorted_pairs, expected.sorted_pairs + pairs))
      << what;
  EXPECT_EQ(std::vector<int32_t>(got.active_experts, got.active_experts + *got.active_count),
            std::vector<int32_t>(expected.active_experts,
                                 expected.active_experts + *expected.active_count))
      << what;
}

// Logits [T, E] that pin the routing: expert 0 is chosen by every token, expert 1 + t % (E/2 - 1)
// by token t (by it alone while T < E/2), the rest among experts 1 .. E/2 - 1 at random; experts
// E/2 .. E-1 by none.
std::vector<float> pinned_logits(int64_t tokens, int64_t experts, uint64_t seed) {
  std::vector<float> logits = random_vector(tokens * experts, seed, 0.1f);
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = logits.data() + t * experts;
    row[0] += 20.0f;
    row[1 + t % (experts / 2 - 1)] += 10.0f;
    for (int64_t e = experts / 2; e < experts; ++e) row[e] = -30.0f;
  }
  return logits;
}

TEST_F(MoeCuda, MoeRouteMatchesCpu) {
  // (experts, top_k): the model's 256 / 8, Qwen3-Next's 512 / 10, small, and experts not a
  // multiple of 32 with the widest top-k.
  for (auto [experts, top_k] :
       {std::tuple<int64_t, int64_t>{8, 2}, {256, 8}, {512, 10}, {1000, 16}})
    for (int64_t tokens : kTokenCounts)
      for (bool renormalize : {true, false}) {
        const std::string what = std::to_string(tokens) + " tokens, " + std::to_string(experts) +
                                 " experts, top " + std::to_string(top_k) +
                                 (renormalize ? ", renormalised" : "");
        auto logits = random_vector(tokens * experts, 50 + experts + tokens);
        std::vector<int32_t> expected_ids(tokens * top_k);
        std::vector<float> expected_weights(tokens * top_k);
        cpu::moe_route(expected_ids.data(), expected_weights.data(), logits.data(), tokens, experts,
                       top_k, renormalize);
        auto d_logits = upload(logits, DType::kF32);
        DeviceRouting device(tokens, experts, top_k);
        cuda::moe_route(device.routing, d_logits.data(), tokens, experts, top_k, renormalize,
                        DType::kF32, nullptr);
        std::vector<int32_t> words;
        const MoeRouting got = device.download_into(words);
        EXPECT_EQ(std::vector<int32_t>(got.ids, got.ids + tokens * top_k), expected_ids) << what;
        EXPECT_LE(relative_l2(download(device.weights), expected_weights), 1e-6) << what;
        expect_layout_matches_cpu(device, what);
        // Rerun: the same bytes.
        const auto first_words = download_bytes(device.words),
                   first_weights = download_bytes(device.weights);
        cuda::moe_route(device.routing, d_logits.data(), tokens, experts, top_k, renormalize,
                        DType::kF32, nullptr);
        EXPECT_EQ(download_bytes(device.words), first_words) << what;
        EXPECT_EQ(download_bytes(device.weights), first_weights) << what;
      }
}

TEST_F(MoeCuda, MoeRouteTiesGoToLowerId) {
  const int64_t experts = 256, top_k = 8;
  for (int64_t tokens : kTokenCounts) {
    std::vector<float> logits(tokens * experts, 0.5f);
    for (int64_t t = 0; t < tokens; ++t)
      logits[t * experts + 200] = 0.75f;  // then 0 .. 6 (all tied)
    auto d_logits = upload(logits, DType::kF32);
    DeviceRouting device(tokens, experts, top_k);
    cuda::moe_route(device.routing, d_logits.data(), tokens, experts, top_k, true, DType::kF32,
                    nullptr);
    std::vector<int32_t> words;
    const MoeRouting got = device.download_into(words);
    for (int64_t t = 0; t < tokens; ++t) {
      EXPECT_EQ(got.ids[t * top_k], 200) << t;
      for (int64_t j = 1; j < top_k; ++j) EXPECT_EQ(got.ids[t * top_k + j], j - 1) << t;
    }
    expect_layout_matches_cpu(device, std::to_string(tokens) + " tokens, ties");
    EXPECT_EQ(*got.active_count, top_k);
  }
}

TEST_F(MoeCuda, MoeRoutePinnedGroups) {
  const int64_t experts = 64, top_k = 4;
  for (int64_t tokens : kTokenCounts) {
    auto d_logits = upload(pinned_logits(tokens, experts, 90 + tokens), DType::kF32);
    DeviceRouting device(tokens, experts, top_k);
    cuda::moe_route(device.routing, d_logits.data(), tokens, experts, top_k, true, DType::kF32,
                    nullptr);
    std::vector<int32_t> words;
    const MoeRouting got = device.download_into(words);
    const std::string what = std::to_string(tokens) + " tokens, pinned";
    EXPECT_EQ(got.expert_offsets[1] - got.expert_offsets[0], tokens)
        << what;  // expert 0: every token
    for (int64_t e = experts / 2; e < experts; ++e)
      EXPECT_EQ(got.expert_offsets[e + 1], got.expert_offsets[e])
          << what << ", expert " << e;  // unused
    EXPECT_EQ(got.expert_offsets[experts], tokens * top_k) << what;
    EXPECT_LE(*got.active_count, experts / 2) << what;
    expect_layout_matches_cpu(device, what);
  }
}

// The shared expert stacked as expert E: logits [T, E + 1] (column E its gate logit, over a wide
// range), each token's pair k expert E with weight sigmoid(logit E), the routed pairs as without
// it; the grouped layout over E + 1 experts (expert E: every token's pair k, in token order);
// bit-identical reruns. Fused (T <= 64) and two-kernel router, top-k up to the widest (16: the
// shared pair on lane 16).
TEST_F(MoeCuda, MoeRouteSharedExpertMatchesCpu) {
  for (auto [experts, top_k] :
       {std::tuple<int64_t, int64_t>{8, 2}, {256, 8}, {512, 10}, {1000, 16}})
    for (int64_t tokens : kTokenCounts)
      for (bool renormalize : {true, false}) {
        const std::string what = std::to_string(tokens) + " tokens, " + std::to_string(experts) +
                                 " experts + shared, top " + std::to_string(top_k) +
                                 (renormalize ? ", renormalised" : "");
        const int64_t columns = experts + 1, slots = top_k + 1;
        auto logits = random_vector(tokens * columns, 70 + experts + tokens);
        for (int64_t t = 0; t < tokens; ++t)
          logits[t * columns + experts] = 0.25f * float(t % 41 - 20);
        std::vector<int32_t> expected_ids(tokens * slots);
        std::vector<float> expected_weights(tokens * slots);
        cpu::moe_route(expected_ids.data(), expected_weights.data(), logits.data(), tokens, experts,
                       top_k, renormalize, true);
        // The routed pairs are the unfolded router's on the first E columns.
        std::vector<float> routed_logits;
        for (int64_t t = 0; t < tokens; ++t)
          routed_logits.insert(routed_logits.end(), logits.begin() + t * columns,
                               logits.begin() + t * columns + experts);
        std::vector<int32_t> routed_ids(tokens * top_k);
        std::vector<float> routed_weights(tokens * top_k);
        cpu::moe_route(routed_ids.data(), routed_weights.data(), routed_logits.data(), tokens,
                       experts, top_k, renormalize);
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t j = 0; j < top_k; ++j) {
            ASSERT_EQ(expected_ids[t * slots + j], routed_ids[t * top_k + j]) << what;
            ASSERT_EQ(expected_weights[t * slots + j], routed_weights[t * top_k + j]) << what;
          }
        auto d_logits = upload(logits, DType::kF32);
        DeviceRouting device(tokens, columns, slots);
        cuda::moe_route(device.routing, d_logits.data(), tokens, experts, top_k, renormalize,
                        DType::kF32, nullptr, true);
        std::vector<int32_t> words;
        const MoeRouting got = device.download_into(words);
        EXPECT_EQ(std::vector<int32_t>(got.ids, got.ids + tokens * slots), expected_ids) << what;
        const auto weights = download(device.weights);
        for (int64_t p = 0; p < tokens * slots; ++p)
          EXPECT_NEAR(weights[p], expected_weights[p], 1e-6) << what << ", pair " << p;
        expect_layout_matches_cpu(device, what);
        ASSERT_EQ(got.expert_offsets[experts + 1] - got.expert_offsets[experts], tokens) << what;
        for (int64_t t = 0; t < tokens; ++t)
          EXPECT_EQ(got.sorted_pairs[got.expert_offsets[experts] + t], t * slots + top_k) << what;
        EXPECT_EQ(got.active_experts[*got.active_count - 1], experts) << what;
        const auto first_words = download_bytes(device.words),
                   first_weights = download_bytes(device.weights);
        // The rerun reads the logits from rows padded to a multiple of 4 (as the model's router
        // writes them), the padding larger than any logit: the same bytes.
        const int64_t stride = (columns + 3) / 4 * 4 + 4;
        std::vector<float> padded(size_t(tokens * stride), 1e3f);
        for (int64_t t = 0; t < tokens; ++t)
          std::copy(logits.begin() + t * columns, logits.begin() + (t + 1) * columns,
                    padded.begin() + t * stride);
        auto d_padded = upload(padded, DType::kF32);
        cuda::moe_route(device.routing, d_padded.data(), tokens, experts, top_k, renormalize,
                        DType::kF32, nullptr, true, stride);
        EXPECT_EQ(download_bytes(device.words), first_words) << what << ", padded rows";
        EXPECT_EQ(download_bytes(device.weights), first_weights) << what << ", padded rows";
      }
}

// moe_expert_gemv given the router: at one token the CUDA-core GEMV routes the step in its own
// blocks (sm90_moe_routed_gemv_fp8_cores), at more it calls moe_route first. Either way the
// routing's words and weights are moe_route's, byte for byte (both start from the same poison),
// the output is the separate launches' byte for byte and the CPU reference's within the FP8 bound
// on the CPU's routing, and a rerun gives the same bytes. With and without the shared expert, its
// logits in rows padded as the model's router writes them (the padding above every logit), the
// router's widths of moe_route's tests, f32 and bf16 outputs.
TEST_F(MoeCuda, MoeRoutedGemvMatchesRouteThenGemv) {
  // A warp's 4 rows past n's end and a second 128-row scale block; two 128-blocks of K.
  const int64_t n = 138, k = 256, n_blocks = (n + 127) / 128, k_blocks = k / 128;
  for (auto [experts, top_k] :
       {std::tuple<int64_t, int64_t>{8, 2}, {256, 8}, {512, 10}, {1000, 16}})
    for (bool shared : {false, true}) {
      const int64_t grouped = experts + shared, slots = top_k + shared,
                    stride = (grouped + 3) / 4 * 4 + 4;
      std::mt19937_64 rng(910 + experts);
      std::normal_distribution<float> normal(0.0f, 60.0f);
      std::uniform_real_distribution<float> uniform(1e-3f, 2e-3f);
      std::vector<uint8_t> w(grouped * n * k);
      for (auto& c : w) c = f32_to_f8e4m3(normal(rng));
      std::vector<float> w_scales(grouped * n_blocks * k_blocks);
      for (auto& v : w_scales) v = uniform(rng);
      auto d_w = upload(w, DType::kU8);
      auto d_w_scales = upload(w_scales, DType::kF32);
      for (int64_t tokens : {1, 3})
        for (DType act : {DType::kF32, DType::kBF16}) {
          const bool renormalize = act == DType::kF32;
          const std::string what = std::to_string(tokens) + " tokens, " + std::to_string(experts) +
                                   " experts" + (shared ? " + shared" : "") + ", top " +
                                   std::to_string(top_k) + ", " + std::string(dtype_name(act));
          const int64_t pairs = tokens * slots;
          std::vector<float> logits(size_t(tokens * stride), 1e3f);
          const auto values = random_vector(tokens * grouped, 900 + experts + tokens);
          for (int64_t t = 0; t < tokens; ++t)
            std::copy(values.begin() + t * grouped, values.begin() + (t + 1) * grouped,
                      logits.begin() + t * stride);
          std::vector<int32_t> ids(pairs);
          std::vector<float> weights(pairs);
          cpu::moe_route(ids.data(), weights.data(), values.data(), tokens, experts, top_k,
                         renormalize, shared);
          std::vector<uint8_t> x(tokens * k);
          for (auto& c : x) c = f32_to_f8e4m3(normal(rng));
          std::vector<float> x_scales(tokens * k_blocks);
          for (auto& v : x_scales) v = uniform(rng);
          std::vector<float> expected(pairs * n);
          cpu::moe_expert_gemv_fp8(expected.data(), x.data(), x_scales.data(), ids.data(), w.data(),
                                   w_scales.data(), pairs, n, k, slots);
          auto d_logits = upload(logits, DType::kF32);
          auto d_x = upload(x, DType::kU8);
          auto d_x_scales = upload(x_scales, DType::kF32);
          const cuda::MoeRouter router{d_logits.data(), experts, top_k,
                                       renormalize,     shared,  stride};
          DeviceRouting separate(tokens, grouped, slots), routed(tokens, grouped, slots);
          const std::vector<int32_t> poison(size_t(separate.words.shape().numel()), -7);
          for (DeviceRouting* routing : {&separate, &routed}) {
            cuda::copy_to_device(routing->words.data(), poison.data(),
                                 poison.size() * sizeof(int32_t));
            upload_as(routing->weights, std::vector<float>(pairs, NAN), DType::kF32);
          }
          cuda::DeviceBuffer y_separate(act, {pairs * n}), y_routed(act, {pairs * n});
          cuda::moe_route(separate.routing, d_logits.data(), tokens, experts, top_k, renormalize,
                          DType::kF32, nullptr, shared, stride);
          cuda::moe_expert_gemv(y_separate.data(), d_x.data(), d_x_scales.as<float>(),
                                separate.routing, d_w.data(), d_w_scales.as<float>(), tokens,
                                grouped, slots, n, k, slots, true, act, nullptr);
          const auto run = [&] {
            cuda::moe_expert_gemv(y_routed.data(), d_x.data(), d_x_scales.as<float>(),
                                  routed.routing, d_w.data(), d_w_scales.as<float>(), tokens,
                                  grouped, slots, n, k, slots, true, act, nullptr, 0, {}, false,
                                  &router);
          };
          run();
          std::vector<int32_t> words;
          const MoeRouting got = routed.download_into(words);
          EXPECT_EQ(std::vector<int32_t>(got.ids, got.ids + pairs), ids) << what;
          EXPECT_EQ(download_bytes(routed.words), download_bytes(separate.words)) << what;
          EXPECT_EQ(download_bytes(routed.weights), download_bytes(separate.weights)) << what;
          const auto first = download_bytes(y_routed);
          EXPECT_EQ(first, download_bytes(y_separate)) << what;
          EXPECT_LE(
              relative_l2(download_as_f32(y_routed, act, size_t(pairs * n)), expected),
              act == DType::kBF16 ? numerics::kCudaMoeBf16OutputRelL2 : numerics::kFp8GemmFp32RelL2)
              << what;
          run();
          EXPECT_EQ(download_bytes(y_routed), first) << what << ": rerun";
          EXPECT_EQ(download_bytes(routed.words), download_bytes(separate.words))
              << what << ": rerun";
        }
    }
}

// One grouped GEMV case: weights [E, n, k] (FP8 codes and block scales, or act), inputs for
// rows = pairs / input_divisor, routing from `logits`; the output vs the CPU reference on the
// device's own ids, and a rerun's bytes vs the first.
void check_grouped_gemv(const std::vector<float>& logits, int64_t tokens, int64_t experts,
                        int64_t top_k, int64_t n, int64_t k, int64_t input_divisor, bool fp8,
                        DType act, uint64_t seed, cuda::MoeGemvSchedule schedule = {},
                        bool routing_ready = false) {
  const int64_t pairs = tokens * top_k, rows = (pairs + input_divisor - 1) / input_divisor;
  const int64_t n_blocks = (n + 127) / 128, k_blocks = (k + 127) / 128;
  const std::string what =
      std::to_string(tokens) + " tokens, n " + std::to_string(n) + ", k " + std::to_string(k) +
      (fp8 ? ", fp8" : ", dense") + ", " + std::string(dtype_name(act)) +
      (input_divisor > 1 ? ", gate_up" : ", down") + ", splits " + std::to_string(schedule.splits) +
      ", cores " + std::to_string(schedule.columns) + (routing_ready ? ", ready" : "");
  auto d_logits = upload(logits, DType::kF32);
  DeviceRouting device(tokens, experts, top_k);
  cuda::moe_route(device.routing, d_logits.data(), tokens, experts, top_k, true, DType::kF32,
                  nullptr);
  std::vector<int32_t> words;
  const MoeRouting host_routing = device.download_into(words);
  std::vector<float> expected(pairs * n);
  cuda::DeviceBuffer y(act, {pairs * n});
  upload_as(y, std::vector<float>(pairs * n, NAN), act);  // poisoned: an unwritten output fails
  std::mt19937_64 rng(seed);
  if (fp8) {
    std::normal_distribution<float> normal(0.0f, 60.0f);
    std::uniform_real_distribution<float> uniform(1e-3f, 2e-3f);
    std::vector<uint8_t> w(experts * n * k), x(rows * k);
    for (auto& c : w) c = f32_to_f8e4m3(normal(rng));
    for (auto& c : x) c = f32_to_f8e4m3(normal(rng));
    std::vector<float> w_scales(experts * n_blocks * k_blocks), x_scales(rows * k_blocks);
    for (auto& s : w_scales) s = uniform(rng);
    for (auto& s : x_scales) s = uniform(rng);
    cpu::moe_expert_gemv_fp8(expected.data(), x.data(), x_scales.data(), host_routing.ids, w.data(),
                             w_scales.data(), pairs, n, k, input_divisor);
    auto d_w = upload(w, DType::kU8), d_x = upload(x, DType::kU8);
    auto d_w_scales = upload(w_scales, DType::kF32), d_x_scales = upload(x_scales, DType::kF32);
    const auto run = [&] {
      cuda::moe_expert_gemv(y.data(), d_x.data(), d_x_scales.as<float>(), device.routing,
                            d_w.data(), d_w_scales.as<float>(), tokens, experts, top_k, n, k,
                            input_divisor, true, act, nullptr, 0, schedule, routing_ready);
    };
    run();
    const auto first = download_bytes(y);
    run();
    EXPECT_EQ(download_bytes(y), first) << what << ": rerun";
  } else {
    std::vector<float> w = random_vector(experts * n * k, seed, 0.05f),
                       x = random_vector(rows * k, seed + 1);
    if (act == DType::kBF16) {  // the CPU computes from the values the device holds
      for (auto& v : w) v = bf16_to_f32(f32_to_bf16(v));
      for (auto& v : x) v = bf16_to_f32(f32_to_bf16(v));
    }
    cpu::moe_expert_gemv(expected.data(), x.data(), host_routing.ids, w.data(), pairs, n, k,
                         input_divisor);
    cuda::DeviceBuffer d_w(act, {experts * n * k}), d_x(act, {rows * k});
    upload_as(d_w, w, act);
    upload_as(d_x, x, act);
    const auto run = [&] {
      cuda::moe_expert_gemv(y.data(), d_x.data(), nullptr, device.routing, d_w.data(), nullptr,
                            tokens, experts, top_k, n, k, input_divisor, false, act, nullptr);
    };
    run();
    const auto first = download_bytes(y);
    run();
    EXPECT_EQ(download_bytes(y), first) << what << ": rerun";
  }
  const double bound = act == DType::kBF16 ? numerics::kCudaMoeBf16OutputRelL2
                       : fp8               ? numerics::kFp8GemmFp32RelL2
                                           : numerics::kSamePathRelL2;
  const double error = relative_l2(download_as_f32(y, act, size_t(pairs * n)), expected);
  EXPECT_LE(error, bound) << what;
}

// gate_up-like (inputs per token, n not a multiple of 16, three K blocks) and down-like (inputs
// per pair, K with a partial last block for FP8 and not a multiple of 32 for dense) shapes, with
// random routing and pinned routing (expert 0 takes every token: 129 pairs, several passes). FP8
// runs the built-in kernel, then the CUDA-core one at each row count a warp (rows past n inside a
// warp: 264 = 33 warps of 8; pinned: 65 passes of two pairs), the down-like case with the routing
// ready before the launch (the test's routing is downloaded first).
TEST_F(MoeCuda, MoeGroupedGemvMatchesCpu) {
  const int64_t experts = 16, top_k = 4;
  for (bool fp8 : {true, false})
    for (int columns : {0, 2, 4, 8})
      for (DType act : {DType::kF32, DType::kBF16})
        for (int64_t tokens : kTokenCounts)
          for (bool pinned : {false, true}) {
            if (!fp8 && columns) continue;
            const uint64_t seed = 300 + tokens + (pinned ? 1000 : 0);
            const auto logits = pinned ? pinned_logits(tokens, experts, seed)
                                       : random_vector(tokens * experts, seed);
            check_grouped_gemv(logits, tokens, experts, top_k, 264, 384, top_k, fp8, act, seed,
                               {0, columns});
            check_grouped_gemv(logits, tokens, experts, top_k, 200, fp8 ? 272 : 200, 1, fp8, act,
                               seed + 7, {0, columns}, columns != 0);
          }
}

// The FP8 splits of K over warps (each of 1, 2, 4 and 8, and the built-in one) at K of 1, 8, 16 and
// 40 128-blocks (fewer blocks than splits' steps too), and the CUDA-core kernel at each of its row
// counts over the same K (one to ten 512-byte rounds).
TEST_F(MoeCuda, MoeGroupedGemvFp8KSplits) {
  const int64_t experts = 8, top_k = 2, tokens = 7;
  for (int64_t k : {128, 1024, 2048, 5120}) {
    for (int splits : {0, 1, 2, 4, 8})
      check_grouped_gemv(random_vector(tokens * experts, 77 + k), tokens, experts, top_k, 128, k,
                         top_k, true, DType::kF32, 78 + k, {splits, 0});
    for (int columns : {2, 4, 8})
      check_grouped_gemv(random_vector(tokens * experts, 77 + k), tokens, experts, top_k, 128, k,
                         top_k, true, DType::kF32, 78 + k, {0, columns});
  }
}

TEST_F(MoeCuda, MoeCombineMatchesCpu) {
  const int64_t top_k = 8;
  for (DType act : {DType::kF32, DType::kBF16})
    for (int64_t hidden : {2048, 100})
      for (int64_t tokens : kTokenCounts)
        for (bool with_shared : {true, false}) {
          const std::string what = std::to_string(tokens) + " tokens, hidden " +
                                   std::to_string(hidden) + ", " + std::string(dtype_name(act)) +
                                   (with_shared ? ", shared" : "");
          auto expert_out = random_vector(tokens * top_k * hidden, 400 + tokens);
          auto shared = random_vector(tokens * hidden, 401 + tokens),
               gate = random_vector(tokens, 402 + tokens);
          auto weights = random_vector(tokens * top_k, 403 + tokens, 0.3f);
          if (act == DType::kBF16)
            for (auto* values : {&expert_out, &shared, &gate})
              for (auto& v : *values) v = bf16_to_f32(f32_to_bf16(v));
          std::vector<float> expected(tokens * hidden);
          cpu::moe_combine(expected.data(), expert_out.data(), weights.data(),
                           with_shared ? shared.data() : nullptr,
                           with_shared ? gate.data() : nullptr, tokens, hidden, top_k);
          cuda::DeviceBuffer d_expert_out(act, {tokens * top_k * hidden}),
              d_shared(act, {tokens * hidden}), d_gate(act, {tokens}), out(act, {tokens * hidden});
          upload_as(d_expert_out, expert_out, act);
          upload_as(d_shared, shared, act);
          upload_as(d_gate, gate, act);
          upload_as(out, std::vector<float>(tokens * hidden, NAN), act);
          auto d_weights = upload(weights, DType::kF32);
          const auto run = [&] {
            cuda::moe_combine(out.data(), d_expert_out.data(), d_weights.as<float>(),
                              with_shared ? d_shared.data() : nullptr,
                              with_shared ? d_gate.data() : nullptr, tokens, hidden, top_k, act,
                              nullptr);
          };
          run();
          const auto first = download_bytes(out);
          run();
          EXPECT_EQ(download_bytes(out), first) << what << ": rerun";
          const double bound =
              act == DType::kBF16 ? numerics::kCudaMoeBf16OutputRelL2 : numerics::kSamePathRelL2;
          EXPECT_LE(relative_l2(download_as_f32(out, act, size_t(tokens * hidden)), expected),
                    bound)
              << what;
        }
}

// The folded shared expert through the grouped GEMV and the combine: FP8 experts [E + 1, n, k]
// (expert E the shared one), a [T, k + 1] routing from moe_route's shared_expert, combined over
// k + 1 pairs, against the CPU's unfolded computation (routed pairs, then + sigmoid(gate) x the
// shared expert's own GEMV), at every token count.
TEST_F(MoeCuda, MoeFoldedSharedExpertMatchesUnfoldedCpu) {
  const int64_t experts = 16, top_k = 4, n = 256, k = 256, columns = experts + 1, slots = top_k + 1;
  const int64_t k_blocks = k / 128, n_blocks = n / 128;
  for (int64_t tokens : kTokenCounts) {
    const std::string what = std::to_string(tokens) + " tokens";
    std::mt19937_64 rng(500 + tokens);
    std::normal_distribution<float> normal(0.0f, 60.0f);
    std::uniform_real_distribution<float> uniform(1e-3f, 2e-3f);
    std::vector<uint8_t> w(columns * n * k), x(tokens * k);
    for (auto& c : w) c = f32_to_f8e4m3(normal(rng));
    for (auto& c : x) c = f32_to_f8e4m3(normal(rng));
    std::vector<float> w_scales(columns * n_blocks * k_blocks), x_scales(tokens * k_blocks);
    for (auto& v : w_scales) v = uniform(rng);
    for (auto& v : x_scales) v = uniform(rng);
    const auto logits = random_vector(tokens * columns, 600 + tokens);
    // CPU, unfolded: the router on the first E columns, the routed GEMV, the shared expert's own.
    std::vector<float> routed_logits, gate(tokens);
    for (int64_t t = 0; t < tokens; ++t) {
      routed_logits.insert(routed_logits.end(), logits.begin() + t * columns,
                           logits.begin() + t * columns + experts);
      gate[t] = logits[t * columns + experts];
    }
    std::vector<int32_t> ids(tokens * top_k), shared_ids(tokens, int32_t(experts));
    std::vector<float> weights(tokens * top_k), routed_out(tokens * top_k * n),
        shared_out(tokens * n), expected(tokens * n);
    cpu::moe_route(ids.data(), weights.data(), routed_logits.data(), tokens, experts, top_k, true);
    cpu::moe_expert_gemv_fp8(routed_out.data(), x.data(), x_scales.data(), ids.data(), w.data(),
                             w_scales.data(), tokens * top_k, n, k, top_k);
    cpu::moe_expert_gemv_fp8(shared_out.data(), x.data(), x_scales.data(), shared_ids.data(),
                             w.data(), w_scales.data(), tokens, n, k, 1);
    cpu::moe_combine(expected.data(), routed_out.data(), weights.data(), shared_out.data(),
                     gate.data(), tokens, n, top_k);
    // CUDA, folded.
    auto d_logits = upload(logits, DType::kF32);
    auto d_w = upload(w, DType::kU8), d_x = upload(x, DType::kU8);
    auto d_w_scales = upload(w_scales, DType::kF32), d_x_scales = upload(x_scales, DType::kF32);
    DeviceRouting device(tokens, columns, slots);
    cuda::DeviceBuffer y(DType::kF32, {tokens * slots * n}), out(DType::kF32, {tokens * n});
    cuda::moe_route(device.routing, d_logits.data(), tokens, experts, top_k, true, DType::kF32,
                    nullptr, true);
    cuda::moe_expert_gemv(y.data(), d_x.data(), d_x_scales.as<float>(), device.routing, d_w.data(),
                          d_w_scales.as<float>(), tokens, columns, slots, n, k, slots, true,
                          DType::kF32, nullptr, 0);
    cuda::moe_combine(out.data(), y.data(), device.weights.as<float>(), nullptr, nullptr, tokens, n,
                      slots, DType::kF32, nullptr);
    EXPECT_LE(relative_l2(download(out), expected), numerics::kFp8GemmFp32RelL2) << what;
  }
}

}  // namespace
}  // namespace vt
