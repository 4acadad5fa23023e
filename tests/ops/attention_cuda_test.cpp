// The attention kernels (ops/attention/) against the CPU reference on awkward shapes: several
// sequences of odd lengths in one step (prefill chunks and single decode tokens mixed),
// block-boundary positions, split-key attention, GQA, partial RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "../numerics.h"
#include "core/dtype.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "op_cuda_test_support.h"
#include "ops/attention/attention.h"
#include "ops/attention/prefill_plan.h"
#include "ops/norm/norm.h"
#include "ops/step_layout.h"

namespace vt {
namespace {

using testing::relative_l2;
using testing::random_vector;
using testing::upload;
using testing::download;
using testing::StepPlan;
using testing::HostLayout;
using testing::make_layout;

class AttentionCuda : public testing::GpuTest {};

// One step's inputs on the host and the device, and the CPU reference's output: per sequence
// (plan.cached[s] earlier tokens, plan.fresh[s] new ones) random earlier keys/values in its paged
// cache (each slot's blocks scattered) and a random projection of the new tokens. With bf16 the
// inputs, the caches and the output are rounded as the CUDA path stores them (the CPU computes in
// f32 from the same rounded values).
struct AttentionStep {
  testing::StepPlan plan;
  HostLayout layout;
  int64_t tokens = 0, seqs = 0, max_blocks = 0;
  DType act;
  cuda::AttentionShape shape;
  std::vector<float> expected;  // [T, Hq*D]: attention x sigmoid(gate)
  cuda::DeviceBuffer projected, q_norm, k_norm, k_cache, v_cache, token_seq, positions, seq_start, slots, tables;
  cuda::StepLayout step;

  std::vector<float> download_act(const cuda::DeviceBuffer& buffer) const {
    return testing::download_as_f32(buffer, act, size_t(buffer.shape().numel()));
  }
};

AttentionStep make_attention_step(int64_t hq, int64_t hkv, int64_t d, DType act, const StepPlan& plan,
                                  int64_t block_size, int64_t rotary, const Rope& rope = Rope{}) {
  const float eps = 1e-6f;
  const bool bf16 = act == DType::kBF16;
  const auto stored = [&](float x) { return bf16 ? bf16_to_f32(f32_to_bf16(x)) : x; };
  const auto upload_act = [&](const std::vector<float>& host) {
    cuda::DeviceBuffer buffer(act, {int64_t(host.size())});
    testing::upload_as(buffer, host, act);
    return buffer;
  };
  AttentionStep a;
  a.plan = plan;
  a.layout = make_layout(plan);
  a.act = act;
  a.shape = {hq, hkv, d, rotary, block_size, rope, eps};
  const HostLayout& layout = a.layout;
  const int64_t T = a.tokens = plan.tokens(), S = a.seqs = int64_t(plan.fresh.size());
  const int64_t width = hq * 2 * d + 2 * hkv * d;
  for (int64_t s = 0; s < S; ++s)
    a.max_blocks = std::max<int64_t>(a.max_blocks, (plan.cached[s] + plan.fresh[s] + block_size - 1) / block_size + 1);
  auto projected = random_vector(T * width, 1);
  for (auto& x : projected) x = stored(x);
  auto q_norm = random_vector(d, 2, 0.1f), k_norm = random_vector(d, 3, 0.1f);

  // CPU: per sequence, contiguous caches holding random earlier keys/values plus this step's.
  a.expected.assign(size_t(T * hq * d), 0.0f);
  std::vector<std::vector<float>> k_history(S), v_history(S);
  for (int64_t s = 0; s < S; ++s) {
    k_history[s] = random_vector(plan.cached[s] * hkv * d, 10 + s);
    v_history[s] = random_vector(plan.cached[s] * hkv * d, 20 + s);
    for (auto& x : k_history[s]) x = stored(x);
    for (auto& x : v_history[s]) x = stored(x);
  }
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = plan.fresh[s], start = plan.cached[s], first = layout.seq_start[s];
    std::vector<float> q(n * hq * d), gate(n * hq * d), k_cache((start + n) * hkv * d), v_cache((start + n) * hkv * d);
    std::copy(k_history[s].begin(), k_history[s].end(), k_cache.begin());
    std::copy(v_history[s].begin(), v_history[s].end(), v_cache.begin());
    for (int64_t t = 0; t < n; ++t) {
      const float* row = &projected[(first + t) * width];
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < d; ++i) {
          q[(t * hq + h) * d + i] = row[h * 2 * d + i];
          gate[(t * hq + h) * d + i] = row[h * 2 * d + d + i];
        }
      for (int64_t i = 0; i < hkv * d; ++i) {
        k_cache[(start + t) * hkv * d + i] = row[hq * 2 * d + i];
        v_cache[(start + t) * hkv * d + i] = row[hq * 2 * d + hkv * d + i];
      }
    }
    cpu::rms_norm(q.data(), q.data(), q_norm.data(), n * hq, d, eps, 1.0f);
    cpu::rms_norm(&k_cache[start * hkv * d], &k_cache[start * hkv * d], k_norm.data(), n * hkv, d, eps, 1.0f);
    std::vector<int64_t> positions(n);
    for (int64_t t = 0; t < n; ++t) positions[t] = start + t;
    cpu::rope_neox(q.data(), positions.data(), n, hq, d, rotary, rope);
    cpu::rope_neox(&k_cache[start * hkv * d], positions.data(), n, hkv, d, rotary, rope);
    for (int64_t i = start * hkv * d; i < (start + n) * hkv * d; ++i) k_cache[i] = stored(k_cache[i]);
    std::vector<float> out(n * hq * d);
    cpu::attention_causal(out.data(), q.data(), k_cache.data(), v_cache.data(), n, start, hq, hkv, d, 1.0f / std::sqrt(float(d)));
    for (int64_t i = 0; i < n * hq * d; ++i)
      a.expected[first * hq * d + i] = out[i] / (1.0f + std::exp(-gate[i]));
  }

  // CUDA: paged caches; earlier keys/values written into each slot's blocks.
  const int64_t slots = S, kv_rows = slots * a.max_blocks * block_size;
  std::vector<float> k_paged(kv_rows * hkv * d, 0.0f), v_paged(kv_rows * hkv * d, 0.0f);
  std::vector<int32_t> tables(slots * a.max_blocks);
  for (int64_t i = 0; i < int64_t(tables.size()); ++i) tables[i] = int32_t(tables.size() - 1 - i);  // scattered blocks
  for (int64_t s = 0; s < S; ++s)
    for (int64_t p = 0; p < plan.cached[s]; ++p) {
      const int64_t slot = layout.slots[s], block = tables[slot * a.max_blocks + p / block_size];
      const int64_t row = block * block_size + p % block_size;
      for (int64_t i = 0; i < hkv * d; ++i) {
        k_paged[row * hkv * d + i] = k_history[s][p * hkv * d + i];
        v_paged[row * hkv * d + i] = v_history[s][p * hkv * d + i];
      }
    }
  a.projected = upload_act(projected);
  a.q_norm = upload(q_norm, DType::kF32);
  a.k_norm = upload(k_norm, DType::kF32);
  a.k_cache = upload_act(k_paged);
  a.v_cache = upload_act(v_paged);
  a.token_seq = upload(layout.token_seq, DType::kI32);
  a.positions = upload(layout.positions, DType::kI32);
  a.seq_start = upload(layout.seq_start, DType::kI32);
  a.slots = upload(layout.slots, DType::kI32);
  a.tables = upload(tables, DType::kI32);
  a.step = {a.token_seq.as<int32_t>(), a.positions.as<int32_t>(), a.seq_start.as<int32_t>(), a.tables.as<int32_t>(),
            a.slots.as<int32_t>(), T, S, a.max_blocks};
  return a;
}

// Attention of one step against the CPU reference for a head layout and activation dtype, on
// paged_attention at several split counts.
void check_attention(int64_t hq, int64_t hkv, int64_t d, DType act, double tolerance,
                     const StepPlan& plan = StepPlan{{37, 0, 15, 100}, {1, 21, 3, 1}}, const Rope& rope = Rope{},
                     int64_t rotary = 16) {
  // By default: sequence 0: 37 cached + 1 decode; 1: prefill of 21; 2: 15 cached + 3 new (crosses
  // a block); 3: 100 cached + 1 decode (every split of 8 holds keys).
  AttentionStep a = make_attention_step(hq, hkv, d, act, plan, 16, rotary, rope);
  const int64_t T = a.tokens, max_keys = a.max_blocks * a.shape.block_size;
  const bool bf16 = act == DType::kBF16;
  for (int64_t splits : {1, 3, 8, 40, 70}) {  // 40, 70: the combine merges chunks of 32 splits
    cuda::DeviceBuffer q(DType::kF32, {T * hq * d}), gate(act, {T * hq * d}), out(act, {T * hq * d});
    cuda::DeviceBuffer partials(DType::kF32, {T * hq * splits * (d + 2)});
    cuda::attention_prepare(q.as<float>(), gate.data(), a.k_cache.data(), a.v_cache.data(), a.projected.data(),
                            a.q_norm.as<float>(), a.k_norm.as<float>(), a.step, a.shape, act, nullptr);
    cuda::paged_attention(out.data(), partials.as<float>(), q.as<float>(), gate.data(), a.k_cache.data(),
                          a.v_cache.data(), a.step, a.shape, splits, (max_keys + splits - 1) / splits, act, nullptr);
    cuda::synchronize();
    const auto result = a.download_act(out);
    const double error = relative_l2(result, a.expected);
    std::printf("attention %s %lld/%lld heads, d %lld, %lld splits: rel L2 %.3g\n", bf16 ? "bf16" : "f32",
                static_cast<long long>(hq), static_cast<long long>(hkv), static_cast<long long>(d),
                static_cast<long long>(splits), error);
    EXPECT_LE(error, tolerance) << hq << "/" << hkv << " heads, d " << d << ", " << splits
                                                        << " splits";
    // Deterministic: the same inputs give the same bits (the prepare rewrites the same cache rows).
    if (splits == 8) {
      cuda::paged_attention(out.data(), partials.as<float>(), q.as<float>(), gate.data(), a.k_cache.data(),
                            a.v_cache.data(), a.step, a.shape, splits, (max_keys + splits - 1) / splits, act, nullptr);
      cuda::synchronize();
      EXPECT_EQ(a.download_act(out), result) << "rerun, " << hq << "/" << hkv << " heads";
    }
  }
}

// Prefill attention (FlashInfer's sm90 kernel over the paged cache, then the gate) of every
// sequence of a step against the CPU reference, bf16, block size 32 and rotary 64 as the
// Qwen3.5 models: the output, its FP8 codes for the o_proj (the CPU quantisation of the output
// rows: scale = max(absmax, 1e-10) / 448 per 128, e4m3 of x / scale) and a bit-identical rerun.
void check_prefill_attention(int64_t hq, int64_t hkv, const StepPlan& plan) {
  const int64_t d = 256;
  AttentionStep a = make_attention_step(hq, hkv, d, DType::kBF16, plan, 32, 64);
  ASSERT_TRUE(cuda::prefill_attention_supports(a.shape, DType::kBF16));
  const int64_t T = a.tokens, S = a.seqs;
  std::vector<cuda::PrefillSequence> sequences;
  for (int64_t s = 0; s < S; ++s)
    sequences.push_back({a.layout.seq_start[s], plan.fresh[s], plan.cached[s] + plan.fresh[s], a.layout.slots[s]});
  cuda::PrefillAttentionPlan work(hq, cuda::prefill_attention_ctas(), T, S);
  work.plan(sequences.data(), S, a.max_blocks);
  auto d_work = upload(work.packed(), DType::kI32);
  cuda::DeviceBuffer q(DType::kBF16, {T * hq * d}), gate(DType::kBF16, {T * hq * d}), out(DType::kBF16, {T * hq * d});
  cuda::DeviceBuffer codes(DType::kU8, {T * hq * d}), scales(DType::kF32, {T * hq * d / 128});
  cuda::attention_prepare(nullptr, gate.data(), a.k_cache.data(), a.v_cache.data(), a.projected.data(),
                          a.q_norm.as<float>(), a.k_norm.as<float>(), a.step, a.shape, DType::kBF16, nullptr, q.data());
  // In place, as the model runs it: the kernel's output in out, the gate applied there.
  const auto run = [&] {
    cuda::prefill_attention(out.data(), out.data(), q.data(), gate.data(), a.k_cache.data(), a.v_cache.data(), a.step,
                            work, d_work.as<int32_t>(), a.shape, nullptr, codes.as<uint8_t>(), scales.as<float>());
    cuda::synchronize();
  };
  run();
  const auto result = a.download_act(out);
  const double error = relative_l2(result, a.expected);
  std::string name;
  for (int64_t s = 0; s < S; ++s)
    name += (s ? " + " : "") + std::to_string(plan.cached[s]) + "|" + std::to_string(plan.fresh[s]);
  std::printf("prefill attention %lld/%lld heads, d 256, cached|new %s: rel L2 %.3g\n", static_cast<long long>(hq),
              static_cast<long long>(hkv), name.c_str(), error);
  EXPECT_LE(error, numerics::kCudaPrefillAttentionBf16RelL2) << hq << "/" << hkv << " heads, " << name;
  const auto host_codes = testing::download_bytes(codes);
  const auto host_scales = download(scales);
  int64_t code_mismatches = 0, scale_mismatches = 0;
  for (int64_t group = 0; group < T * hq * d / 128; ++group) {
    float absmax = 0.0f;
    for (int64_t i = 0; i < 128; ++i) absmax = std::max(absmax, std::fabs(result[size_t(group * 128 + i)]));
    const float scale = std::max(absmax, 1e-10f) / 448.0f;
    scale_mismatches += host_scales[size_t(group)] != scale;
    for (int64_t i = 0; i < 128; ++i) {
      const float x = std::min(std::max(result[size_t(group * 128 + i)] / scale, -448.0f), 448.0f);
      code_mismatches += host_codes[size_t(group * 128 + i)] != f32_to_f8e4m3(x);
    }
  }
  EXPECT_EQ(scale_mismatches, 0) << name;
  EXPECT_EQ(code_mismatches, 0) << name;
  run();  // deterministic: one CTA per output tile, no split keys
  EXPECT_EQ(a.download_act(out), result) << "rerun, " << name;
  EXPECT_EQ(testing::download_bytes(codes), host_codes) << "rerun, " << name;
}

// f32: the grouped CUDA-core kernel (3 query heads per KV head, 8 per KV head at d 128) and, for
// a group size it is not built for (5), the per-head kernel; bf16: the tensor-core kernel at the
// 27B's layout (24 / 4 heads of 256), the 35B-A3B's (16 / 2 of 256) and at 8 heads of 128 per KV
// head, the CUDA-core one at d 64.
TEST_F(AttentionCuda, AttentionMatchesCpu) {
  check_attention(6, 2, 64, DType::kF32, numerics::kCudaAttentionF32RelL2);
  check_attention(16, 2, 128, DType::kF32, numerics::kCudaAttentionF32RelL2);
  check_attention(10, 2, 64, DType::kF32, numerics::kCudaAttentionF32RelL2);
  check_attention(24, 4, 256, DType::kBF16, numerics::kCudaAttentionBf16RelL2);
  check_attention(16, 2, 256, DType::kBF16, numerics::kCudaAttentionBf16RelL2);
  check_attention(16, 2, 128, DType::kBF16, numerics::kCudaAttentionBf16RelL2);
  check_attention(6, 2, 64, DType::kBF16, numerics::kCudaAttentionBf16RelL2);
}

// YaRN (the family's 1M-token setting: factor 4 over the native context, here over 1,024
// positions so that a short test reaches past it): the prepare kernel's frequencies and
// attention factor against the CPU reference's, at positions inside and past the original
// context, rotary 64 of 256 as the family.
TEST_F(AttentionCuda, YarnRopeMatchesCpu) {
  YarnConfig yarn;
  yarn.factor = 4.0;
  yarn.original_max_position_embeddings = 1024;
  const Rope rope = yarn_rope(1e7, 64, yarn);
  const StepPlan plan{{3000, 0, 1020}, {1, 40, 9}};
  check_attention(24, 4, 256, DType::kBF16, numerics::kCudaAttentionBf16RelL2, plan, rope, 64);
  check_attention(6, 2, 64, DType::kF32, numerics::kCudaAttentionF32RelL2, plan, rope, 64);
}

// The 27B's heads (24 / 4) at awkward lengths (one token, a tile less one, a tile, a tile and
// one, many tiles with a ragged last), after a cached prefix that ends mid-block, and two
// sequences in one step (the second's tokens after the first's, its prefix in other blocks); the
// family's other layouts (16 / 2, 32 / 2) on a mixed step.
TEST_F(AttentionCuda, PrefillMatchesCpu) {
  if (!cuda::prefill_attention_supports({24, 4, 256, 64, 32, Rope{1e7f}, 1e-6f}, DType::kBF16))
    GTEST_SKIP() << "built without FlashInfer's headers";
  for (int32_t length : {1, 63, 64, 65, 1000}) check_prefill_attention(24, 4, StepPlan{{0}, {length}});
  check_prefill_attention(24, 4, StepPlan{{100}, {65}});
  check_prefill_attention(24, 4, StepPlan{{100, 37}, {65, 130}});
  check_prefill_attention(16, 2, StepPlan{{0, 300}, {200, 17}});
  check_prefill_attention(32, 2, StepPlan{{45, 0}, {129, 1}});
}

}  // namespace
}  // namespace vt
