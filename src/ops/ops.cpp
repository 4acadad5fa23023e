#include "ops/ops.h"

#include "ops/activation/activation.h"
#include "ops/attention/attention.h"
#include "ops/embedding/embedding.h"
#include "ops/gdn/gdn.h"
#include "ops/gemm/gemm.h"
#include "ops/moe/moe.h"
#include "ops/norm/norm.h"

#include "core/error.h"
#include "trace/op_timer.h"

namespace vt::ops {
namespace {

void expect_cpu_f32(const TensorView& t, const char* op, const char* name) {
  VT_CHECK(t.device == Device::kCpu, op, ": ", name, " is not on the CPU (no CUDA op yet)");
  VT_CHECK(t.dtype == DType::kF32, op, ": ", name, " must be f32, got ", dtype_name(t.dtype));
  VT_CHECK(t.data != nullptr || t.numel() == 0, op, ": ", name, " has no data");
}

int64_t last_dim(const TensorView& t) { return t.dim(t.rank() - 1); }

using trace::OpGroup;
using Timer = trace::ScopedOpTimer;
constexpr double kF32 = 4.0;  // bytes per element of the f32 operands

}  // namespace

void embedding(const TensorView& out, const TensorView& ids, const TensorView& table) {
  expect_cpu_f32(out, "embedding", "out");
  VT_CHECK(ids.dtype == DType::kI32 && ids.rank() == 1, "embedding: ids must be i32 [T]");
  VT_CHECK(table.rank() == 2 && is_float(table.dtype), "embedding: table must be a float [V, H]");
  VT_CHECK(out.rank() == 2 && out.dim(0) == ids.dim(0) && out.dim(1) == table.dim(1),
           "embedding: out ", out.shape.str(), " vs ids ", ids.shape.str(), " table ", table.shape.str());
  for (int64_t t = 0; t < ids.dim(0); ++t) {
    int32_t id = ids.as<int32_t>()[t];
    VT_CHECK(id >= 0 && id < table.dim(0), "embedding: token id ", id, " at position ", t,
             " is outside the vocabulary [0, ", table.dim(0), ")");
  }
  Timer timer(
      "embedding", OpGroup::kEmbed, {ids.dim(0), table.dim(1)},
      double(out.numel()) * (kF32 + double(dtype_size(table.dtype))) + 4.0 * double(ids.dim(0)), 0);
  cpu::embedding(out.f32(), ids.as<int32_t>(), ids.dim(0), table.data, table.dtype, table.dim(0),
                 table.dim(1));
}

void rms_norm(const TensorView& out, const TensorView& x, const TensorView& w, float eps,
              float weight_offset) {
  expect_cpu_f32(out, "rms_norm", "out");
  expect_cpu_f32(x, "rms_norm", "x");
  expect_cpu_f32(w, "rms_norm", "w");
  const int64_t n = w.numel();
  VT_CHECK(out.shape == x.shape && last_dim(x) == n, "rms_norm: x ", x.shape.str(), " out ",
           out.shape.str(), " w ", w.shape.str());
  Timer timer("rms_norm", OpGroup::kNorm, {x.numel() / n, n}, kF32 * double(2 * x.numel() + n),
              4.0 * double(x.numel()));
  cpu::rms_norm(out.f32(), x.f32(), w.f32(), x.numel() / n, n, eps, weight_offset);
}

void gated_rms_norm(const TensorView& out, const TensorView& x, const TensorView& z,
                    const TensorView& w, float eps) {
  for (const auto* t : {&out, &x, &z, &w}) expect_cpu_f32(*t, "gated_rms_norm", "operand");
  const int64_t n = w.numel();
  VT_CHECK(out.numel() == x.numel() && z.numel() == x.numel() && x.numel() % n == 0,
           "gated_rms_norm: x ", x.shape.str(), " z ", z.shape.str(), " w ", w.shape.str());
  Timer timer("gated_rms_norm", OpGroup::kNorm, {x.numel() / n, n},
              kF32 * double(3 * x.numel() + n), 8.0 * double(x.numel()));
  cpu::gated_rms_norm(out.f32(), x.f32(), z.f32(), w.f32(), x.numel() / n, n, eps);
}

void rope_neox(const TensorView& x, const TensorView& positions, int64_t rotary_dim, const Rope& rope) {
  expect_cpu_f32(x, "rope_neox", "x");
  VT_CHECK(x.rank() == 3, "rope_neox: x must be [T, heads, head_dim], got ", x.shape.str());
  VT_CHECK(positions.dtype == DType::kI64 && positions.numel() == x.dim(0),
           "rope_neox: positions must be i64 [T]");
  VT_CHECK(rotary_dim % 2 == 0 && rotary_dim <= x.dim(2), "rope_neox: rotary_dim ", rotary_dim,
           " must be even and <= head_dim ", x.dim(2));
  Timer timer("rope_neox", OpGroup::kAttention, {x.dim(0), x.dim(1), rotary_dim},
              kF32 * double(2 * x.dim(0) * x.dim(1) * rotary_dim) + 8.0 * double(x.dim(0)),
              3.0 * double(x.dim(0) * x.dim(1) * rotary_dim));
  cpu::rope_neox(x.f32(), positions.as<int64_t>(), x.dim(0), x.dim(1), x.dim(2), rotary_dim, rope);
}

void attention_causal(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                      const TensorView& v_cache, int64_t start, float scale) {
  for (const auto* t : {&out, &q, &k_cache, &v_cache}) expect_cpu_f32(*t, "attention", "operand");
  VT_CHECK(q.rank() == 3 && k_cache.rank() == 3 && k_cache.shape == v_cache.shape &&
               out.shape == q.shape,
           "attention: q ", q.shape.str(), " k_cache ", k_cache.shape.str(), " v_cache ",
           v_cache.shape.str(), " out ", out.shape.str());
  VT_CHECK(q.dim(2) == k_cache.dim(2) && q.dim(1) % k_cache.dim(1) == 0,
           "attention: head_dim or GQA grouping mismatch");
  VT_CHECK(start >= 0 && start + q.dim(0) <= k_cache.dim(0), "attention: positions ", start, "..",
           start + q.dim(0), " exceed the cache capacity ", k_cache.dim(0));
  const int64_t context = start + q.dim(0);  // keys each query may read, at most
  Timer timer("attention_causal", OpGroup::kAttention,
              {q.dim(0), q.dim(1), k_cache.dim(1), q.dim(2)},
              kF32 * double(2 * q.numel() + 2 * context * k_cache.dim(1) * k_cache.dim(2)),
              4.0 * double(q.dim(0) * q.dim(1) * context * q.dim(2)));
  cpu::attention_causal(out.f32(), q.f32(), k_cache.f32(), v_cache.f32(), q.dim(0), start, q.dim(1),
                        k_cache.dim(1), q.dim(2), scale);
}

void causal_conv1d_silu(const TensorView& out, const TensorView& x, const TensorView& state,
                        const TensorView& weight) {
  for (const auto* t : {&out, &x, &state, &weight}) expect_cpu_f32(*t, "causal_conv1d", "operand");
  VT_CHECK(x.rank() == 2 && out.shape == x.shape && weight.rank() == 2 &&
               weight.dim(0) == x.dim(1) && state.rank() == 2 && state.dim(0) == x.dim(1) &&
               state.dim(1) == weight.dim(1) - 1,
           "causal_conv1d: x ", x.shape.str(), " weight ", weight.shape.str(), " state ",
           state.shape.str());
  Timer timer("causal_conv1d_silu", OpGroup::kGdn, {x.dim(0), x.dim(1), weight.dim(1)},
              kF32 * double(2 * x.numel() + 2 * state.numel() + weight.numel()),
              2.0 * double(x.numel() * weight.dim(1)));
  cpu::causal_conv1d_silu(out.f32(), x.f32(), state.f32(), weight.f32(), x.dim(0), x.dim(1),
                          weight.dim(1));
}

void gated_delta_rule(const TensorView& out, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& g, const TensorView& beta,
                      const TensorView& state, DeltaRuleMode mode, int64_t chunk_size) {
  for (const auto* t : {&out, &q, &k, &v, &g, &beta, &state})
    expect_cpu_f32(*t, "gated_delta_rule", "operand");
  VT_CHECK(q.rank() == 3 && q.shape == k.shape && v.rank() == 3 && out.shape == v.shape &&
               q.dim(0) == v.dim(0),
           "gated_delta_rule: q ", q.shape.str(), " k ", k.shape.str(), " v ", v.shape.str());
  const int64_t tokens = q.dim(0), hk = q.dim(1), dk = q.dim(2), hv = v.dim(1), dv = v.dim(2);
  VT_CHECK(hv % hk == 0, "gated_delta_rule: value heads ", hv, " not a multiple of key heads ", hk);
  VT_CHECK(g.numel() == tokens * hv && beta.numel() == tokens * hv, "gated_delta_rule: g/beta size");
  VT_CHECK(state.numel() == hv * dk * dv, "gated_delta_rule: state ", state.shape.str());
  // Per token and value head: decay, k^T S, the rank-1 update and q^T S over [dk, dv].
  Timer timer("gated_delta_rule", OpGroup::kGdn, {tokens, hv, dk, dv},
              kF32 * double(q.numel() + k.numel() + v.numel() + g.numel() + beta.numel() +
                            out.numel() + 2 * state.numel()),
              7.0 * double(tokens * hv * dk * dv));
  if (mode == DeltaRuleMode::kRecurrent) {
    cpu::gated_delta_rule_recurrent(out.f32(), q.f32(), k.f32(), v.f32(), g.f32(), beta.f32(),
                                    state.f32(), tokens, hk, hv, dk, dv);
  } else {
    VT_CHECK(chunk_size > 0, "gated_delta_rule: chunk_size must be positive");
    cpu::gated_delta_rule_chunked(out.f32(), q.f32(), k.f32(), v.f32(), g.f32(), beta.f32(),
                                  state.f32(), tokens, hk, hv, dk, dv, chunk_size);
  }
}

void l2_normalize(const TensorView& x, float eps) {
  expect_cpu_f32(x, "l2_normalize", "x");
  const int64_t n = last_dim(x);
  Timer timer("l2_normalize", OpGroup::kNorm, {x.numel() / n, n}, kF32 * double(2 * x.numel()),
              3.0 * double(x.numel()));
  cpu::l2_normalize(x.f32(), x.numel() / n, n, eps);
}

void silu_mul(const TensorView& out, const TensorView& gate_up) {
  expect_cpu_f32(out, "silu_mul", "out");
  expect_cpu_f32(gate_up, "silu_mul", "gate_up");
  VT_CHECK(out.rank() == 2 && gate_up.rank() == 2 && out.dim(0) == gate_up.dim(0) &&
               gate_up.dim(1) == 2 * out.dim(1),
           "silu_mul: gate_up ", gate_up.shape.str(), " out ", out.shape.str());
  Timer timer("silu_mul", OpGroup::kElementwise, {out.dim(0), out.dim(1)},
              kF32 * double(3 * out.numel()), 5.0 * double(out.numel()));
  cpu::silu_mul(out.f32(), gate_up.f32(), out.dim(0), out.dim(1));
}

void moe_route(const TensorView& expert_ids, const TensorView& weights, const TensorView& logits,
               bool renormalize) {
  expect_cpu_f32(logits, "moe_route", "logits");
  expect_cpu_f32(weights, "moe_route", "weights");
  VT_CHECK(expert_ids.dtype == DType::kI32 && expert_ids.shape == weights.shape &&
               logits.rank() == 2 && weights.rank() == 2 && weights.dim(0) == logits.dim(0) &&
               weights.dim(1) <= logits.dim(1),
           "moe_route: logits ", logits.shape.str(), " ids ", expert_ids.shape.str());
  Timer timer("moe_route", OpGroup::kMoe, {logits.dim(0), logits.dim(1), weights.dim(1)},
              kF32 * double(logits.numel() + 2 * weights.numel()), 3.0 * double(logits.numel()));
  cpu::moe_route(expert_ids.as<int32_t>(), weights.f32(), logits.f32(), logits.dim(0),
                 logits.dim(1), weights.dim(1), renormalize);
}

void add_in_place(const TensorView& x, const TensorView& y) {
  expect_cpu_f32(x, "add_in_place", "x");
  expect_cpu_f32(y, "add_in_place", "y");
  VT_CHECK(x.numel() == y.numel(), "add_in_place: x ", x.shape.str(), " y ", y.shape.str());
  Timer timer("add_in_place", OpGroup::kElementwise, {x.numel()}, kF32 * double(3 * x.numel()),
              double(x.numel()));
  float* a = x.f32();
  const float* b = y.f32();
  for (int64_t i = 0; i < x.numel(); ++i) a[i] += b[i];
}

void matmul_nt(const TensorView& y, const TensorView& x, const TensorView& w, bool accumulate,
               OpGroup group) {
  for (const auto* t : {&y, &x, &w}) expect_cpu_f32(*t, "matmul", "operand");
  VT_CHECK(x.rank() == 2 && w.rank() == 2 && y.rank() == 2 && x.dim(1) == w.dim(1) &&
               y.dim(0) == x.dim(0) && y.dim(1) == w.dim(0),
           "matmul: y ", y.shape.str(), " = x ", x.shape.str(), " @ w ", w.shape.str(), "^T");
  const int64_t m = x.dim(0), n = w.dim(0), k = x.dim(1);
  Timer timer("matmul_nt", group, {m, n, k},
              kF32 * double(m * k + n * k + (accumulate ? 2 : 1) * m * n),
              2.0 * double(m) * double(n) * double(k));
  cpu::matmul_nt(y.f32(), x.f32(), w.f32(), x.dim(0), w.dim(0), x.dim(1), accumulate);
}

void fp8_quant_dequant(const TensorView& out, const TensorView& x, int64_t group) {
  expect_cpu_f32(out, "fp8_quant", "out");
  expect_cpu_f32(x, "fp8_quant", "x");
  VT_CHECK(x.rank() == 2 && out.shape == x.shape && group > 0, "fp8_quant: x ", x.shape.str());
  Timer timer("fp8_quant_dequant", OpGroup::kQuantize, {x.dim(0), x.dim(1)},
              kF32 * double(2 * x.numel()), 4.0 * double(x.numel()));
  cpu::fp8_quant_dequant_rows(out.f32(), x.f32(), x.dim(0), x.dim(1), group);
}

}  // namespace vt::ops
