// The Gated DeltaNet kernels (ops/gdn/) against the CPU reference: conv and recurrent step over
// mixed sequences, the rollback windows, the chunked delta rule and its fused FP8 output, and
// copy_spans.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../numerics.h"
#include "core/dtype.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "op_cuda_test_support.h"
#include "ops/gdn/gdn.h"
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

class GdnCuda : public testing::GpuTest {};

TEST_F(GdnCuda, GatedDeltaNetMatchesCpu) {
  const int64_t hk = 2, hv = 6, dk = 32, dv = 48, kernel = 4, conv_dim = 2 * hk * dk + hv * dv;
  const int64_t value_dim = hv * dv, stride = conv_dim + value_dim;
  const float eps = 1e-6f;
  const StepPlan plan{{5, 0, 2}, {1, 70, 3}};  // decode, a prefill longer than a chunk, a short one
  const HostLayout layout = make_layout(plan);
  const int64_t T = plan.tokens(), S = int64_t(plan.fresh.size());
  auto projected = random_vector(T * stride, 31), ba = random_vector(T * 2 * hv, 32);
  auto conv_weight = random_vector(conv_dim * kernel, 33, 0.5f), a_log = random_vector(hv, 34, 0.5f);
  auto dt_bias = random_vector(hv, 35, 0.5f), norm_w = random_vector(dv, 36, 0.1f);
  for (auto& w : norm_w) w += 1.0f;
  auto conv_state = random_vector(S * conv_dim * (kernel - 1), 37), recurrent = random_vector(S * hv * dk * dv, 38, 0.1f);

  // CPU reference, sequence by sequence with the same slot mapping.
  std::vector<float> expected(T * value_dim), expected_conv = conv_state, expected_state = recurrent;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = plan.fresh[s], first = layout.seq_start[s], slot = layout.slots[s];
    std::vector<float> mixed(n * conv_dim), z(n * value_dim), conv_out(n * conv_dim);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < stride; ++c)
        (c < conv_dim ? mixed[t * conv_dim + c] : z[t * value_dim + c - conv_dim]) = projected[(first + t) * stride + c];
    cpu::causal_conv1d_silu(conv_out.data(), mixed.data(), &expected_conv[slot * conv_dim * (kernel - 1)],
                            conv_weight.data(), n, conv_dim, kernel);
    std::vector<float> q(n * hk * dk), k(n * hk * dk), v(n * value_dim), g(n * hv), beta(n * hv), core(n * value_dim);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < hk * dk; ++i) {
        q[t * hk * dk + i] = conv_out[t * conv_dim + i];
        k[t * hk * dk + i] = conv_out[t * conv_dim + hk * dk + i];
      }
      for (int64_t i = 0; i < value_dim; ++i) v[t * value_dim + i] = conv_out[t * conv_dim + 2 * hk * dk + i];
      for (int64_t h = 0; h < hv; ++h) {
        beta[t * hv + h] = 1.0f / (1.0f + std::exp(-ba[(first + t) * 2 * hv + h]));
        const float a = ba[(first + t) * 2 * hv + hv + h] + dt_bias[h];
        g[t * hv + h] = -std::exp(a_log[h]) * (a > 20.0f ? a : std::log1p(std::exp(a)));
      }
    }
    cpu::l2_normalize(q.data(), n * hk, dk, 1e-6f);
    cpu::l2_normalize(k.data(), n * hk, dk, 1e-6f);
    for (auto& x : q) x *= 1.0f / std::sqrt(float(dk));
    cpu::gated_delta_rule_recurrent(core.data(), q.data(), k.data(), v.data(), g.data(), beta.data(),
                                    &expected_state[slot * hv * dk * dv], n, hk, hv, dk, dv);
    cpu::gated_rms_norm(&expected[first * value_dim], core.data(), z.data(), norm_w.data(), n * hv, dv, eps);
  }

  auto d_projected = upload(projected, DType::kF32), d_ba = upload(ba, DType::kF32);
  auto d_conv_weight = upload(conv_weight, DType::kF32), d_a_log = upload(a_log, DType::kF32);
  auto d_dt_bias = upload(dt_bias, DType::kF32), d_norm = upload(norm_w, DType::kF32);
  auto d_conv_state = upload(conv_state, DType::kF32), d_recurrent = upload(recurrent, DType::kF32);
  auto d_seq = upload(layout.token_seq, DType::kI32), d_pos = upload(layout.positions, DType::kI32);
  auto d_start = upload(layout.seq_start, DType::kI32), d_slots = upload(layout.slots, DType::kI32);
  cuda::StepLayout step{d_seq.as<int32_t>(), d_pos.as<int32_t>(), d_start.as<int32_t>(), nullptr,
                        d_slots.as<int32_t>(), T, S, 0};
  const cuda::DeltaNetShape shape{hk, hv, dk, dv, kernel, eps};
  cuda::DeviceBuffer conv_out(DType::kF32, {T * conv_dim}), out(DType::kF32, {T * value_dim});
  cuda::gdn_conv(conv_out.as<float>(), d_conv_state.as<float>(), d_projected.data(), stride, d_conv_weight.as<float>(),
                 step, shape, DType::kF32, nullptr);
  cuda::gdn_recurrent({out.data(), d_recurrent.as<float>(), conv_out.as<float>(),
                       d_projected.data(), stride, conv_dim, d_ba.data(), d_a_log.as<float>(),
                       d_dt_bias.as<float>(), d_norm.as<float>(), step, shape, nullptr, nullptr},
                      DType::kF32, nullptr);
  cuda::synchronize();
  EXPECT_LE(relative_l2(download(out), expected), 1e-5);
  EXPECT_LE(relative_l2(download(d_conv_state), expected_conv), 1e-6);
  EXPECT_LE(relative_l2(download(d_recurrent), expected_state), 1e-5);
}

// Speculative verification's rollback window: a step of three sequences (9 tokens from entry 1,
// one token keeping no window, 4 tokens from entry 3) at the real 128 x 128 head size saves, bit
// for bit, the conv and recurrent states that running its tokens one step at a time leaves after
// each token; nothing else in the window is written; outputs and final states equal the
// window-less kernels' exactly.
TEST_F(GdnCuda, GatedDeltaNetWindowSavesEachTokensState) {
  const int64_t hk = 2, hv = 4, dk = 128, dv = 128, kernel = 4, conv_dim = 2 * hk * dk + hv * dv;
  const int64_t value_dim = hv * dv, stride = conv_dim + value_dim, history = kernel - 1;
  const int64_t conv_size = conv_dim * history, state_size = hv * dk * dv, entries = 10;
  const float eps = 1e-6f, sentinel = -7.0f;
  const StepPlan plan{{4, 2, 6}, {9, 1, 4}};
  const std::vector<int32_t> first_entry = {1, -1, 3};
  const HostLayout layout = make_layout(plan);
  const int64_t T = plan.tokens(), S = int64_t(plan.fresh.size());
  auto projected = random_vector(T * stride, 41), ba = random_vector(T * 2 * hv, 42);
  auto conv_weight = random_vector(conv_dim * kernel, 43, 0.5f), a_log = random_vector(hv, 44, 0.5f);
  auto dt_bias = random_vector(hv, 45, 0.5f), norm_w = random_vector(dv, 46, 0.1f);
  for (auto& w : norm_w) w += 1.0f;
  const auto conv_state = random_vector(S * conv_size, 47), recurrent = random_vector(S * state_size, 48, 0.1f);
  auto d_conv_weight = upload(conv_weight, DType::kF32), d_a_log = upload(a_log, DType::kF32);
  auto d_dt_bias = upload(dt_bias, DType::kF32), d_norm = upload(norm_w, DType::kF32);
  const cuda::DeltaNetShape shape{hk, hv, dk, dv, kernel, eps};

  struct Run {
    cuda::DeviceBuffer conv, state, out;
  };
  // One step over `rows` of the inputs as the sequences `seqs` (slots from the plan), with windows or not.
  const auto run = [&](Run& r, const std::vector<int64_t>& rows, const std::vector<int32_t>& seqs,
                       const std::vector<int32_t>& starts, const cuda::GdnWindow* conv_window,
                       const cuda::GdnWindow* state_window) {
    std::vector<float> step_projected, step_ba;
    std::vector<int32_t> token_seq, positions, slots;
    for (size_t i = 0; i < rows.size(); ++i) {
      step_projected.insert(step_projected.end(), projected.begin() + rows[i] * stride,
                            projected.begin() + (rows[i] + 1) * stride);
      step_ba.insert(step_ba.end(), ba.begin() + rows[i] * 2 * hv, ba.begin() + (rows[i] + 1) * 2 * hv);
      positions.push_back(layout.positions[rows[i]]);
    }
    for (size_t s = 0; s + 1 < starts.size(); ++s)
      for (int32_t t = starts[s]; t < starts[s + 1]; ++t) token_seq.push_back(int32_t(s));
    for (int32_t seq : seqs) slots.push_back(layout.slots[seq]);
    auto d_projected = upload(step_projected, DType::kF32), d_ba = upload(step_ba, DType::kF32);
    auto d_seq = upload(token_seq, DType::kI32), d_pos = upload(positions, DType::kI32);
    auto d_start = upload(starts, DType::kI32), d_slots = upload(slots, DType::kI32);
    const int64_t n = int64_t(rows.size());
    cuda::StepLayout step{d_seq.as<int32_t>(), d_pos.as<int32_t>(), d_start.as<int32_t>(), nullptr,
                          d_slots.as<int32_t>(), n, int64_t(seqs.size()), 0};
    cuda::DeviceBuffer conv_out(DType::kF32, {n * conv_dim}), out(DType::kF32, {n * value_dim});
    cuda::gdn_conv(conv_out.as<float>(), r.conv.as<float>(), d_projected.data(), stride, d_conv_weight.as<float>(),
                   step, shape, DType::kF32, nullptr, conv_window ? *conv_window : cuda::GdnWindow{});
    cuda::gdn_recurrent({out.data(), r.state.as<float>(), conv_out.as<float>(), d_projected.data(),
                         stride, conv_dim, d_ba.data(), d_a_log.as<float>(), d_dt_bias.as<float>(),
                         d_norm.as<float>(), step, shape, nullptr, nullptr},
                        DType::kF32, nullptr, state_window ? *state_window : cuda::GdnWindow{});
    cuda::synchronize();
    return download(out);
  };
  std::vector<int64_t> all_rows(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) all_rows[size_t(t)] = t;
  const std::vector<int32_t> all_seqs = {0, 1, 2};

  // The window step, and the same step without windows.
  Run windowed{upload(conv_state, DType::kF32), upload(recurrent, DType::kF32), {}};
  auto conv_window = upload(std::vector<float>(S * entries * conv_size, sentinel), DType::kF32);
  auto state_window = upload(std::vector<float>(S * entries * state_size, sentinel), DType::kF32);
  auto d_first = upload(first_entry, DType::kI32);
  const cuda::GdnWindow conv_w{conv_window.as<float>(), d_first.as<int32_t>(), entries};
  const cuda::GdnWindow state_w{state_window.as<float>(), d_first.as<int32_t>(), entries};
  const auto out_windowed = run(windowed, all_rows, all_seqs, layout.seq_start, &conv_w, &state_w);
  Run plain{upload(conv_state, DType::kF32), upload(recurrent, DType::kF32), {}};
  const auto out_plain = run(plain, all_rows, all_seqs, layout.seq_start, nullptr, nullptr);
  EXPECT_TRUE(out_windowed == out_plain);
  EXPECT_TRUE(download(windowed.conv) == download(plain.conv));
  EXPECT_TRUE(download(windowed.state) == download(plain.state));

  // Token by token: the states after each token, and the outputs.
  Run single{upload(conv_state, DType::kF32), upload(recurrent, DType::kF32), {}};
  std::vector<float> want_conv_window(S * entries * conv_size, sentinel), want_state_window(S * entries * state_size, sentinel);
  std::vector<float> out_single;
  for (int32_t s = 0; s < int32_t(S); ++s) {
    const int64_t slot = layout.slots[s];
    for (int32_t t = layout.seq_start[s]; t < layout.seq_start[s + 1]; ++t) {
      const auto out = run(single, {t}, {s}, {0, 1}, nullptr, nullptr);
      out_single.insert(out_single.end(), out.begin(), out.end());
      if (first_entry[s] < 0) continue;
      const int64_t entry = first_entry[s] + (t - layout.seq_start[s]);
      const auto conv_now = download(single.conv), state_now = download(single.state);
      std::copy(conv_now.begin() + slot * conv_size, conv_now.begin() + (slot + 1) * conv_size,
                want_conv_window.begin() + (slot * entries + entry) * conv_size);
      std::copy(state_now.begin() + slot * state_size, state_now.begin() + (slot + 1) * state_size,
                want_state_window.begin() + (slot * entries + entry) * state_size);
    }
  }
  EXPECT_TRUE(out_single == out_plain) << "rel L2 " << relative_l2(out_single, out_plain);
  EXPECT_TRUE(download(conv_window) == want_conv_window) << "rel L2 " << relative_l2(download(conv_window), want_conv_window);
  EXPECT_TRUE(download(state_window) == want_state_window)
      << "rel L2 " << relative_l2(download(state_window), want_state_window);
  EXPECT_TRUE(download(single.state) == download(plain.state));
}

// The CPU reference of a GDN step after the conv: per sequence (slot from the layout), q/k/v from
// conv_out [T, conv_dim], L2 norms, gating, the delta rule (token by token or in 64-token chunks)
// on recurrent [slots, hv, dk, dv], gated RMSNorm with z from `projected`: out [T, hv*dv].
struct GdnInputs {
  int64_t hk, hv, dk, dv, stride, z_offset;
  std::vector<float> conv_out, projected, ba, a_log, dt_bias, norm_w;
  float eps;
};

std::vector<float> cpu_gdn_core(const GdnInputs& in, const HostLayout& layout, std::vector<float>& recurrent,
                                bool chunked) {
  const int64_t hk = in.hk, hv = in.hv, dk = in.dk, dv = in.dv, conv_dim = 2 * hk * dk + hv * dv;
  const int64_t T = layout.seq_start.back(), value_dim = hv * dv;
  std::vector<float> out(size_t(T * value_dim));
  for (size_t s = 0; s + 1 < layout.seq_start.size(); ++s) {
    const int64_t first = layout.seq_start[s], n = layout.seq_start[s + 1] - first, slot = layout.slots[s];
    std::vector<float> q(n * hk * dk), k(n * hk * dk), v(n * value_dim), z(n * value_dim), g(n * hv), beta(n * hv),
        core(n * value_dim);
    for (int64_t t = 0; t < n; ++t) {
      const float* row = &in.conv_out[size_t((first + t) * conv_dim)];
      std::copy(row, row + hk * dk, &q[t * hk * dk]);
      std::copy(row + hk * dk, row + 2 * hk * dk, &k[t * hk * dk]);
      std::copy(row + 2 * hk * dk, row + conv_dim, &v[t * value_dim]);
      for (int64_t i = 0; i < value_dim; ++i) z[t * value_dim + i] = in.projected[(first + t) * in.stride + in.z_offset + i];
      for (int64_t h = 0; h < hv; ++h) {
        beta[t * hv + h] = 1.0f / (1.0f + std::exp(-in.ba[(first + t) * 2 * hv + h]));
        const float a = in.ba[(first + t) * 2 * hv + hv + h] + in.dt_bias[h];
        g[t * hv + h] = -std::exp(in.a_log[h]) * (a > 20.0f ? a : std::log1p(std::exp(a)));
      }
    }
    cpu::l2_normalize(q.data(), n * hk, dk, 1e-6f);
    cpu::l2_normalize(k.data(), n * hk, dk, 1e-6f);
    for (auto& x : q) x *= 1.0f / std::sqrt(float(dk));
    float* state = &recurrent[size_t(slot * hv * dk * dv)];
    if (chunked)
      cpu::gated_delta_rule_chunked(core.data(), q.data(), k.data(), v.data(), g.data(), beta.data(), state, n, hk, hv,
                                    dk, dv, 64);
    else
      cpu::gated_delta_rule_recurrent(core.data(), q.data(), k.data(), v.data(), g.data(), beta.data(), state, n, hk,
                                      hv, dk, dv);
    cpu::gated_rms_norm(&out[size_t(first * value_dim)], core.data(), z.data(), in.norm_w.data(), n * hv, dv, in.eps);
  }
  return out;
}

GdnInputs random_gdn_inputs(int64_t hk, int64_t hv, int64_t dk, int64_t dv, int64_t T, uint64_t seed) {
  GdnInputs in{hk, hv, dk, dv, 0, 0, {}, {}, {}, {}, {}, {}, 1e-6f};
  const int64_t conv_dim = 2 * hk * dk + hv * dv;
  in.z_offset = conv_dim + 8;  // z sits inside a wider row, as in the model's [qkv | z] projection
  in.stride = in.z_offset + hv * dv + 5;
  // conv_out is a SiLU output in the model: mostly positive, some small negatives.
  in.conv_out = random_vector(size_t(T * conv_dim), seed);
  for (auto& x : in.conv_out) x = x / (1.0f + std::exp(-x));
  in.projected = random_vector(size_t(T * in.stride), seed + 1);
  in.ba = random_vector(size_t(T * 2 * hv), seed + 2);
  in.a_log = random_vector(size_t(hv), seed + 3, 0.5f);
  in.dt_bias = random_vector(size_t(hv), seed + 4, 0.5f);
  in.norm_w = random_vector(size_t(dv), seed + 5, 0.1f);
  for (auto& w : in.norm_w) w += 1.0f;
  return in;
}

struct GdnRun {
  std::vector<float> out, state;
};

// One GPU step over `in` with the recurrent state starting at `initial`: chunked_from = 0 runs
// gdn_recurrent alone (every sequence token by token); else gdn_recurrent for the sequences
// shorter than it (when `recurrent_too`) and gdn_chunked(min_tokens = chunked_from).
GdnRun gpu_gdn_core(const GdnInputs& in, const HostLayout& layout, const std::vector<float>& initial,
                    int64_t chunked_from, bool recurrent_too, int seqs_per_cluster = 0) {
  const int64_t T = layout.seq_start.back(), S = int64_t(layout.slots.size());
  auto d_conv_out = upload(in.conv_out, DType::kF32), d_projected = upload(in.projected, DType::kF32);
  auto d_ba = upload(in.ba, DType::kF32), d_a_log = upload(in.a_log, DType::kF32);
  auto d_dt_bias = upload(in.dt_bias, DType::kF32), d_norm = upload(in.norm_w, DType::kF32);
  auto d_state = upload(initial, DType::kF32);
  auto d_seq = upload(layout.token_seq, DType::kI32), d_pos = upload(layout.positions, DType::kI32);
  auto d_start = upload(layout.seq_start, DType::kI32), d_slots = upload(layout.slots, DType::kI32);
  const cuda::StepLayout step{d_seq.as<int32_t>(), d_pos.as<int32_t>(), d_start.as<int32_t>(), nullptr,
                              d_slots.as<int32_t>(), T, S, 0};
  const cuda::DeltaNetShape shape{in.hk, in.hv, in.dk, in.dv, 4, in.eps};
  // Poisoned output: an element no kernel writes reads back as NaN (relative_l2: infinite).
  auto out = upload(std::vector<float>(size_t(T * in.hv * in.dv), NAN), DType::kF32);
  if (chunked_from == 0 || recurrent_too)
    cuda::gdn_recurrent(
        {out.data(), d_state.as<float>(), d_conv_out.as<float>(), d_projected.data(), in.stride,
         in.z_offset, d_ba.data(), d_a_log.as<float>(), d_dt_bias.as<float>(), d_norm.as<float>(),
         step, shape, nullptr, nullptr},
        DType::kF32, nullptr, {}, chunked_from, seqs_per_cluster);
  if (chunked_from > 0) {
    const int64_t floats = cuda::gdn_chunked_scratch_floats(T, S, chunked_from, shape);
    auto scratch = upload(std::vector<float>(size_t(floats), NAN), DType::kF32);
    cuda::gdn_chunked({out.data(), d_state.as<float>(), d_conv_out.as<float>(), d_projected.data(),
                       in.stride, in.z_offset, d_ba.data(), d_a_log.as<float>(),
                       d_dt_bias.as<float>(), d_norm.as<float>(), step, shape, nullptr, nullptr},
                      DType::kF32, nullptr, scratch.as<float>(), floats, chunked_from);
    cuda::synchronize();
  }
  cuda::synchronize();
  return {download(out), download(d_state)};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The conv's two schedules (ops/gdn/gdn.h): the tokens in parallel (prefill) and one thread per
// channel walking them (decode) give the same bits, outputs and states, over sequences shorter
// than the kernel's history (1, 2 tokens), exactly as long (3), just longer (4, 5) and long (17,
// 70, 300: several 16-token tiles, tiles across sequence boundaries) with decode tokens between
// them, slots in reverse, f32 and bf16 inputs, and equal the CPU reference's conv. The outputs
// start poisoned (NaN): a row neither schedule writes fails.
TEST_F(GdnCuda, ConvSchedulesGiveTheSameBits) {
  const int64_t hk = 2, hv = 4, dk = 32, dv = 48, kernel = 4, history = kernel - 1;
  const int64_t conv_dim = 2 * hk * dk + hv * dv;
  // An even row stride (the per-token kernel takes channel pairs) and an odd one (one channel a
  // thread: a pair's load would be misaligned).
  for (const int64_t stride : {conv_dim + hv * dv, conv_dim + hv * dv + 1}) {
    SCOPED_TRACE("row stride " + std::to_string(stride));
    const StepPlan plan{{0, 9, 0, 0, 4, 0, 7, 0, 0, 2}, {1, 1, 2, 3, 1, 4, 5, 17, 70, 300}};
    const HostLayout layout = make_layout(plan);
    const int64_t T = plan.tokens(), S = int64_t(plan.fresh.size());
    const auto projected = random_vector(T * stride, 61);
    const auto conv_weight = random_vector(conv_dim * kernel, 62, 0.5f);
    const auto conv_state = random_vector(S * conv_dim * history, 63);
    auto d_seq = upload(layout.token_seq, DType::kI32), d_pos = upload(layout.positions, DType::kI32);
    auto d_start = upload(layout.seq_start, DType::kI32), d_slots = upload(layout.slots, DType::kI32);
    const cuda::StepLayout step{d_seq.as<int32_t>(), d_pos.as<int32_t>(), d_start.as<int32_t>(), nullptr,
                                d_slots.as<int32_t>(), T, S, 0};
    const cuda::DeltaNetShape shape{hk, hv, dk, dv, kernel, 1e-6f};
    auto d_weight = upload(conv_weight, DType::kF32);
    for (DType act : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string(dtype_name(act)));
      cuda::DeviceBuffer d_projected(act, {T * stride});
      testing::upload_as(d_projected, projected, act);
      // The inputs as the kernels see them (bf16-rounded for bf16), for the CPU reference.
      const std::vector<float> seen = testing::download_as_f32(d_projected, act, size_t(T * stride));
      std::vector<float> want_out(size_t(T * conv_dim)), want_state = conv_state;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t n = plan.fresh[s], first = layout.seq_start[s], slot = layout.slots[s];
        std::vector<float> mixed(size_t(n * conv_dim));
        for (int64_t t = 0; t < n; ++t)
          for (int64_t c = 0; c < conv_dim; ++c) mixed[t * conv_dim + c] = seen[(first + t) * stride + c];
        cpu::causal_conv1d_silu(want_out.data() + first * conv_dim, mixed.data(), &want_state[slot * conv_dim * history],
                                conv_weight.data(), n, conv_dim, kernel);
      }
      std::vector<std::vector<float>> outs, states;
      for (cuda::ConvSchedule schedule : {cuda::ConvSchedule::kChannels, cuda::ConvSchedule::kTokens}) {
        auto out = upload(std::vector<float>(size_t(T * conv_dim), NAN), DType::kF32);
        auto state = upload(conv_state, DType::kF32);
        cuda::gdn_conv(out.as<float>(), state.as<float>(), d_projected.data(), stride, d_weight.as<float>(), step, shape,
                       act, nullptr, {}, schedule);
        cuda::synchronize();
        outs.push_back(download(out));
        states.push_back(download(state));
      }
      EXPECT_TRUE(same_bits(outs[1], outs[0])) << "outputs";
      EXPECT_TRUE(same_bits(states[1], states[0])) << "states";
      EXPECT_LE(relative_l2(outs[1], want_out), numerics::kSamePathRelL2);  // __expf in the SiLU
      EXPECT_TRUE(same_bits(states[1], want_state)) << "the state is the inputs, moved";
    }
  }
}

// The chunked delta rule against the CPU reference, token by token and chunked, over awkward
// lengths in one step (1, 63, 64, 65, 200, 1000 tokens, decode tokens between them, a non-zero
// initial state, slots in reverse) at the golden models' head dims (16, 64), an odd one (32/48)
// and the real 128: both as run_step dispatches it (sequences of >= 64 tokens in chunks, the
// rest through gdn_recurrent, whose rows must equal the recurrent-only run bit for bit) and with
// every sequence chunked (T = 1 and 63 too). Bit-identical run to run.
TEST_F(GdnCuda, GatedDeltaNetChunkedMatchesCpu) {
  struct Dims {
    int64_t hk, hv, dk, dv;
  };
  const StepPlan plan{{0, 5, 0, 9, 3, 0, 12, 0}, {1, 63, 1, 64, 65, 200, 1, 1000}};
  const HostLayout layout = make_layout(plan);
  const int64_t T = plan.tokens(), S = int64_t(plan.fresh.size());
  for (const Dims& d : {Dims{2, 4, 16, 16}, Dims{2, 4, 64, 64}, Dims{2, 6, 32, 48}, Dims{2, 4, 128, 128}}) {
    SCOPED_TRACE("dk " + std::to_string(d.dk) + " dv " + std::to_string(d.dv));
    const GdnInputs in = random_gdn_inputs(d.hk, d.hv, d.dk, d.dv, T, 100 + d.dk + d.dv);
    const auto initial = random_vector(size_t(S * d.hv * d.dk * d.dv), 200 + d.dk, 0.1f);
    std::vector<float> state_recurrent = initial, state_chunked = initial;
    const auto want_recurrent = cpu_gdn_core(in, layout, state_recurrent, false);
    const auto want_chunked = cpu_gdn_core(in, layout, state_chunked, true);

    const GdnRun recurrent = gpu_gdn_core(in, layout, initial, 0, false);
    const GdnRun mixed = gpu_gdn_core(in, layout, initial, 64, true);
    const GdnRun all_chunked = gpu_gdn_core(in, layout, initial, 1, false);
    for (const GdnRun* run : {&mixed, &all_chunked}) {
      const char* name = run == &mixed ? "mixed" : "all chunked";
      EXPECT_LE(relative_l2(run->out, want_recurrent), numerics::kCudaChunkedDeltaRuleRelL2) << name;
      EXPECT_LE(relative_l2(run->out, want_chunked), numerics::kCudaChunkedDeltaRuleRelL2) << name;
      EXPECT_LE(relative_l2(run->state, state_recurrent), numerics::kCudaChunkedDeltaRuleRelL2) << name;
      EXPECT_LE(relative_l2(run->state, state_chunked), numerics::kCudaChunkedDeltaRuleRelL2) << name;
    }
    // Per sequence too: a short one's error does not hide in the 1000-token one's norm.
    const int64_t value_dim = d.hv * d.dv, state_size = d.hv * d.dk * d.dv;
    for (int64_t s = 0; s < S; ++s) {
      const auto rows = [&](const std::vector<float>& v) {
        return std::vector<float>(v.begin() + layout.seq_start[s] * value_dim, v.begin() + layout.seq_start[s + 1] * value_dim);
      };
      const auto slot_state = [&](const std::vector<float>& v) {
        const int64_t slot = layout.slots[s];
        return std::vector<float>(v.begin() + slot * state_size, v.begin() + (slot + 1) * state_size);
      };
      EXPECT_LE(relative_l2(rows(all_chunked.out), rows(want_recurrent)), numerics::kCudaChunkedDeltaRuleRelL2)
          << "sequence " << s << " of " << plan.fresh[s] << " tokens";
      EXPECT_LE(relative_l2(slot_state(all_chunked.state), slot_state(state_recurrent)),
                numerics::kCudaChunkedDeltaRuleRelL2)
          << "sequence " << s << " of " << plan.fresh[s] << " tokens";
      if (plan.fresh[s] < 64) {  // the mixed step ran these through gdn_recurrent, as the plain step did
        EXPECT_TRUE(same_bits(rows(mixed.out), rows(recurrent.out))) << "sequence " << s;
        EXPECT_TRUE(same_bits(slot_state(mixed.state), slot_state(recurrent.state))) << "sequence " << s;
      }
    }
    const GdnRun again = gpu_gdn_core(in, layout, initial, 1, false);
    EXPECT_TRUE(same_bits(again.out, all_chunked.out));
    EXPECT_TRUE(same_bits(again.state, all_chunked.state));
    const GdnRun mixed_again = gpu_gdn_core(in, layout, initial, 64, true);
    EXPECT_TRUE(same_bits(mixed_again.out, mixed.out));
    EXPECT_TRUE(same_bits(mixed_again.state, mixed.state));
    // gdn_recurrent's clusters walking 3 and 8 sequences each (the next one's state streamed in
    // meanwhile), the chunked ones skipped in turn: the same bits as one sequence per cluster.
    for (int per_cluster : {3, 8}) {
      SCOPED_TRACE("seqs_per_cluster " + std::to_string(per_cluster));
      const GdnRun walked = gpu_gdn_core(in, layout, initial, 0, false, per_cluster);
      const GdnRun walked_mixed = gpu_gdn_core(in, layout, initial, 64, true, per_cluster);
      EXPECT_TRUE(same_bits(walked.out, recurrent.out));
      EXPECT_TRUE(same_bits(walked.state, recurrent.state));
      EXPECT_TRUE(same_bits(walked_mixed.out, mixed.out));
      EXPECT_TRUE(same_bits(walked_mixed.state, mixed.state));
    }
  }
}

// The chunked kernels' fused FP8 output for the out_proj (bf16 activations, dv = 128): the codes
// and scales are the CPU quantisation (scale = max(absmax, 1e-10) / 448, e4m3 of x / scale) of
// the kernel's own bf16 output, bit for bit, per (token, head); the output is the recurrent
// kernel's to bf16 rounding; a step whose sequences are all shorter than min_tokens writes nothing.
TEST_F(GdnCuda, GatedDeltaNetChunkedFp8OutputAndBf16) {
  const int64_t hk = 2, hv = 4, dk = 128, dv = 128, value_dim = hv * dv;
  const StepPlan plan{{0, 7}, {130, 1}};
  const HostLayout layout = make_layout(plan);
  const int64_t T = plan.tokens(), S = int64_t(plan.fresh.size());
  GdnInputs in = random_gdn_inputs(hk, hv, dk, dv, T, 300);
  const auto to_bf16 = [](const std::vector<float>& values) {
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
    return bits;
  };
  const auto initial = random_vector(size_t(S * hv * dk * dv), 301, 0.1f);
  auto d_conv_out = upload(in.conv_out, DType::kF32), d_projected = upload(to_bf16(in.projected), DType::kBF16);
  auto d_ba = upload(to_bf16(in.ba), DType::kBF16), d_a_log = upload(in.a_log, DType::kF32);
  auto d_dt_bias = upload(in.dt_bias, DType::kF32), d_norm = upload(in.norm_w, DType::kF32);
  auto d_seq = upload(layout.token_seq, DType::kI32), d_pos = upload(layout.positions, DType::kI32);
  auto d_start = upload(layout.seq_start, DType::kI32), d_slots = upload(layout.slots, DType::kI32);
  const cuda::StepLayout step{d_seq.as<int32_t>(), d_pos.as<int32_t>(), d_start.as<int32_t>(), nullptr,
                              d_slots.as<int32_t>(), T, S, 0};
  const cuda::DeltaNetShape shape{hk, hv, dk, dv, 4, in.eps};
  const int64_t floats = cuda::gdn_chunked_scratch_floats(T, S, 64, shape);
  cuda::DeviceBuffer scratch(DType::kF32, {floats});
  const auto read_bf16 = [](const cuda::DeviceBuffer& buffer) {
    std::vector<uint16_t> bits(size_t(buffer.shape().numel()));
    cuda::copy_to_host(bits.data(), buffer.data(), bits.size() * 2);
    std::vector<float> values(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) values[i] = bf16_to_f32(bits[i]);
    return values;
  };
  // The chunked step (the 1-token sequence through gdn_recurrent) and the recurrent-only step.
  std::vector<std::vector<float>> outs;
  std::vector<uint8_t> codes(size_t(T * value_dim));
  std::vector<float> scales(size_t(T * hv));
  for (int64_t chunked_from : {int64_t(64), int64_t(0)}) {
    auto d_state = upload(initial, DType::kF32);
    cuda::DeviceBuffer out(DType::kBF16, {T * value_dim}), q(DType::kU8, {T * value_dim}), q_scales(DType::kF32, {T * hv});
    cuda::gdn_recurrent(
        {out.data(), d_state.as<float>(), d_conv_out.as<float>(), d_projected.data(), in.stride,
         in.z_offset, d_ba.data(), d_a_log.as<float>(), d_dt_bias.as<float>(), d_norm.as<float>(),
         step, shape, q.as<uint8_t>(), q_scales.as<float>()},
        DType::kBF16, nullptr, {}, chunked_from);
    if (chunked_from > 0)
      cuda::gdn_chunked(
          {out.data(), d_state.as<float>(), d_conv_out.as<float>(), d_projected.data(), in.stride,
           in.z_offset, d_ba.data(), d_a_log.as<float>(), d_dt_bias.as<float>(), d_norm.as<float>(),
           step, shape, q.as<uint8_t>(), q_scales.as<float>()},
          DType::kBF16, nullptr, scratch.as<float>(), floats, chunked_from);
    cuda::synchronize();
    outs.push_back(read_bf16(out));
    if (chunked_from == 0) continue;
    cuda::copy_to_host(codes.data(), q.data(), codes.size());
    scales = download(q_scales);
  }
  const double out_rel_l2 = relative_l2(outs[0], outs[1]);
  std::printf("gdn_chunked bf16 output vs gdn_recurrent: relative L2 %.3g (bound %.3g)\n", out_rel_l2,
              numerics::kCudaChunkedBf16OutputRelL2);
  EXPECT_LE(out_rel_l2, numerics::kCudaChunkedBf16OutputRelL2);
  int64_t code_mismatches = 0, scale_mismatches = 0;
  for (int64_t row = 0; row < T * hv; ++row) {
    float absmax = 0.0f;
    for (int64_t c = 0; c < dv; ++c) absmax = std::max(absmax, std::fabs(outs[0][size_t(row * dv + c)]));
    const float scale = std::max(absmax, 1e-10f) / 448.0f;
    scale_mismatches += scales[size_t(row)] != scale;
    for (int64_t c = 0; c < dv; ++c) {
      const float x = std::min(std::max(outs[0][size_t(row * dv + c)] / scale, -448.0f), 448.0f);
      code_mismatches += codes[size_t(row * dv + c)] != f32_to_f8e4m3(x);
    }
  }
  EXPECT_EQ(scale_mismatches, 0);
  EXPECT_EQ(code_mismatches, 0);

  // min_tokens above every sequence's length: the chunked kernels touch neither output nor state.
  auto d_state = upload(initial, DType::kF32);
  auto out = upload(to_bf16(std::vector<float>(size_t(T * value_dim), 5.0f)), DType::kBF16);
  cuda::gdn_chunked({out.data(), d_state.as<float>(), d_conv_out.as<float>(), d_projected.data(),
                     in.stride, in.z_offset, d_ba.data(), d_a_log.as<float>(),
                     d_dt_bias.as<float>(), d_norm.as<float>(), step, shape, nullptr, nullptr},
                    DType::kBF16, nullptr, scratch.as<float>(), floats, 131);
  cuda::synchronize();
  EXPECT_TRUE(read_bf16(out) == std::vector<float>(size_t(T * value_dim), 5.0f));
  EXPECT_TRUE(download(d_state) == initial);
}

// copy_spans: more spans than one launch takes, empty, one-element and misaligned ones.
TEST_F(GdnCuda, CopySpansCopiesEverySpan) {
  std::vector<int64_t> counts;
  for (int i = 0; i < 70; ++i) counts.push_back(i == 3 ? 0 : (i * 7919) % 5000 + (i % 5 == 0 ? 200000 : 1));
  int64_t total = 0;
  for (int64_t count : counts) total += count + 1;  // + 1: the next span starts misaligned
  const auto source = random_vector(size_t(total), 77);
  auto d_source = upload(source, DType::kF32);
  auto d_dest = upload(std::vector<float>(size_t(total), 0.0f), DType::kF32);
  std::vector<cuda::CopySpan> spans;
  int64_t offset = 0;
  for (int64_t count : counts) {
    spans.push_back({d_dest.as<float>() + offset, d_source.as<float>() + offset, count});
    offset += count + 1;
  }
  cuda::copy_spans(spans.data(), int64_t(spans.size()), nullptr);
  cuda::synchronize();
  const auto got = download(d_dest);
  offset = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    EXPECT_TRUE(std::equal(got.begin() + offset, got.begin() + offset + counts[i], source.begin() + offset)) << i;
    EXPECT_EQ(got[size_t(offset + counts[i])], 0.0f) << "wrote past span " << i;
    offset += counts[i] + 1;
  }
}

}  // namespace
}  // namespace vt
