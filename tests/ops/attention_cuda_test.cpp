// The attention kernels (ops/attention/) against the CPU reference on awkward shapes: several
// sequences of odd lengths in one step (prefill chunks and single decode tokens mixed),
// block-boundary positions, split-key attention, GQA, partial RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "../numerics.h"
#include "core/dtype.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "op_cuda_test_support.h"
#include "ops/attention/attention.h"
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

// Attention of one step against the CPU reference for a head layout and activation dtype: with
// bf16 the inputs, the caches and the output are rounded as the CUDA path stores them (the CPU
// computes in f32 from the same rounded values).
void check_attention(int64_t hq, int64_t hkv, int64_t d, DType act, double tolerance) {
  const int64_t rotary = 16, block_size = 16, max_blocks = 8;
  const float theta = 10000.0f, eps = 1e-6f;
  const bool bf16 = act == DType::kBF16;
  const auto stored = [&](float x) { return bf16 ? bf16_to_f32(f32_to_bf16(x)) : x; };
  const auto upload_act = [&](const std::vector<float>& host) {
    if (!bf16) return upload(host, DType::kF32);
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i) bits[i] = f32_to_bf16(host[i]);
    return upload(bits, DType::kBF16);
  };
  const auto download_act = [&](const cuda::DeviceBuffer& buffer) {
    if (!bf16) return download(buffer);
    std::vector<uint16_t> bits(size_t(buffer.shape().numel()));
    cuda::copy_to_host(bits.data(), buffer.data(), bits.size() * sizeof(uint16_t));
    std::vector<float> host(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) host[i] = bf16_to_f32(bits[i]);
    return host;
  };
  // Sequence 0: 37 cached + 1 decode; 1: prefill of 21; 2: 15 cached + 3 new (crosses a block);
  // 3: 100 cached + 1 decode (every split of 8 holds keys).
  const StepPlan plan{{37, 0, 15, 100}, {1, 21, 3, 1}};
  const HostLayout layout = make_layout(plan);
  const int64_t T = plan.tokens(), S = int64_t(plan.fresh.size()), width = hq * 2 * d + 2 * hkv * d;
  auto projected = random_vector(T * width, 1);
  for (auto& x : projected) x = stored(x);
  auto q_norm = random_vector(d, 2, 0.1f), k_norm = random_vector(d, 3, 0.1f);

  // CPU: per sequence, contiguous caches holding random earlier keys/values plus this step's.
  std::vector<float> expected(T * hq * d);
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
    cpu::rope_neox(q.data(), positions.data(), n, hq, d, rotary, theta);
    cpu::rope_neox(&k_cache[start * hkv * d], positions.data(), n, hkv, d, rotary, theta);
    for (int64_t i = start * hkv * d; i < (start + n) * hkv * d; ++i) k_cache[i] = stored(k_cache[i]);
    std::vector<float> out(n * hq * d);
    cpu::attention_causal(out.data(), q.data(), k_cache.data(), v_cache.data(), n, start, hq, hkv, d, 1.0f / std::sqrt(float(d)));
    for (int64_t i = 0; i < n * hq * d; ++i)
      expected[first * hq * d + i] = out[i] / (1.0f + std::exp(-gate[i]));
  }

  // CUDA: paged caches; earlier keys/values written into each slot's blocks.
  const int64_t slots = S, kv_rows = slots * max_blocks * block_size;
  std::vector<float> k_paged(kv_rows * hkv * d, 0.0f), v_paged(kv_rows * hkv * d, 0.0f);
  std::vector<int32_t> tables(slots * max_blocks);
  for (int64_t i = 0; i < int64_t(tables.size()); ++i) tables[i] = int32_t(tables.size() - 1 - i);  // scattered blocks
  for (int64_t s = 0; s < S; ++s)
    for (int64_t p = 0; p < plan.cached[s]; ++p) {
      const int64_t slot = layout.slots[s], block = tables[slot * max_blocks + p / block_size];
      const int64_t row = block * block_size + p % block_size;
      for (int64_t i = 0; i < hkv * d; ++i) {
        k_paged[row * hkv * d + i] = k_history[s][p * hkv * d + i];
        v_paged[row * hkv * d + i] = v_history[s][p * hkv * d + i];
      }
    }
  auto d_projected = upload_act(projected), d_q_norm = upload(q_norm, DType::kF32), d_k_norm = upload(k_norm, DType::kF32);
  auto d_k = upload_act(k_paged), d_v = upload_act(v_paged);
  auto d_seq = upload(layout.token_seq, DType::kI32), d_pos = upload(layout.positions, DType::kI32);
  auto d_start = upload(layout.seq_start, DType::kI32), d_slots = upload(layout.slots, DType::kI32);
  auto d_tables = upload(tables, DType::kI32);
  cuda::StepLayout step{d_seq.as<int32_t>(), d_pos.as<int32_t>(), d_start.as<int32_t>(), d_tables.as<int32_t>(),
                        d_slots.as<int32_t>(), T, S, max_blocks};
  const cuda::AttentionShape shape{hq, hkv, d, rotary, block_size, theta, eps};
  std::vector<float> first_run;
  for (int64_t splits : {1, 3, 8, 40, 70}) {  // 40, 70: the combine merges chunks of 32 splits
    cuda::DeviceBuffer q(DType::kF32, {T * hq * d}), gate(act, {T * hq * d}), out(act, {T * hq * d});
    cuda::DeviceBuffer partials(DType::kF32, {T * hq * splits * (d + 2)});
    cuda::attention_prepare(q.as<float>(), gate.data(), d_k.data(), d_v.data(), d_projected.data(), d_q_norm.as<float>(),
                            d_k_norm.as<float>(), step, shape, act, nullptr);
    cuda::paged_attention(out.data(), partials.as<float>(), q.as<float>(), gate.data(), d_k.data(), d_v.data(), step,
                          shape, splits, (max_blocks * block_size + splits - 1) / splits, act, nullptr);
    cuda::synchronize();
    const auto result = download_act(out);
    const double error = relative_l2(result, expected);
    std::printf("attention %s %lld/%lld heads, d %lld, %lld splits: rel L2 %.3g\n", bf16 ? "bf16" : "f32",
                static_cast<long long>(hq), static_cast<long long>(hkv), static_cast<long long>(d),
                static_cast<long long>(splits), error);
    EXPECT_LE(error, tolerance) << hq << "/" << hkv << " heads, d " << d << ", " << splits
                                                        << " splits";
    // Deterministic: the same inputs give the same bits (the prepare rewrites the same cache rows).
    if (splits == 8) {
      cuda::paged_attention(out.data(), partials.as<float>(), q.as<float>(), gate.data(), d_k.data(), d_v.data(),
                            step, shape, splits, (max_blocks * block_size + splits - 1) / splits, act, nullptr);
      cuda::synchronize();
      EXPECT_EQ(download_act(out), result) << "rerun, " << hq << "/" << hkv << " heads";
    }
  }
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

}  // namespace
}  // namespace vt
