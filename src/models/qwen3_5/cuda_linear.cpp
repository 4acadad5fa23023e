// The Qwen3.5 CUDA forward's linears: FP8 block-scaled through the GEMM registry's choice (their
// inputs' FP8 codes fused into the op before them where it can), dense through cuBLASLt or vt's
// GEMV; and the residual branch a block's output projection leaves for the next norm.
#include <cuda_runtime.h>

#include "core/error.h"
#include "models/qwen3_5/cuda_model.h"
#include "models/qwen3_5/cuda_workspace.h"
#include "ops/gemm/gemm.h"
#include "trace/intent.h"

namespace vt {

using trace::OpGroup;

void Qwen35CudaForward::linear(const CudaLinear& linear, void* y, const void* x, int64_t m, const Fp8Rows& fused,
                             cudaStream_t on) {
  const DType act = options_.activations;
  const size_t element = dtype_size(act);
  if (linear.format == WeightFormat::kFp8Block) {
    VT_CHECK(!on || on == stream_, "FP8 linears run on the model's stream");
    auto& w = *workspace_;
    Fp8Rows input = fused;
    if (!input.codes) {
      input = {w.scratch.as<uint8_t>(), w.scratch_scales.as<float>()};
      cuda::fp8_quantize_rows(w.scratch.as<uint8_t>(), w.scratch_scales.as<float>(), x, m, linear.k, act, stream_);
    }
    // Parts that could not merge (rows not whole 128-blocks) write their own column range.
    for (const auto& part : linear.parts) {
      // Batch invariance: the mma kernel at every M (its K split is fixed, each row's sums the same
      // whatever rows share its tiles); the registry's choice changes kernel with M.
      const cuda::GemmBackend backend = options_.batch_invariant ? cuda::GemmBackend::kMma
                                                                 : fp8_gemm_->choose(m, part.n, linear.k, linear.n, act);
      fp8_gemm_->run(backend, static_cast<char*>(y) + part.column * element, linear.n, input.codes, input.scales,
                     part.weight.as<uint8_t>(), part.scales.as<float>(), m, part.n, linear.k, act, stream_);
    }
    if (linear.exact_count > 0)
      cuda::exact_columns_add(y, linear.n, x, linear.exact_columns.as<int32_t>(), linear.exact_weight.data(), m,
                              linear.n, linear.k, linear.exact_count, act, stream_);
    return;
  }
  VT_CHECK(linear.parts.size() == 1, "dense linear parts are always merged");
  if (options_.batch_invariant) {  // one per-row kernel at every M (cuBLASLt's algorithm depends on M)
    cuda::dense_gemv_rows(y, act, x, linear.parts[0].weight.data(), m, linear.n, linear.k, act, on ? on : stream_);
    return;
  }
  // Narrow projections at decode (GDN b/a, the shared-expert gate): one kernel where cuBLASLt
  // runs split-K + a reduction; wide ones stay with cuBLASLt (>= 90% of bandwidth at M = 1).
  if (linear.n <= kNarrowDense && cuda::dense_gemv_supports(m, linear.n, linear.k, act)) {
    cuda::dense_gemv(y, act, x, linear.parts[0].weight.data(), m, linear.n, linear.k, act, on ? on : stream_);
    return;
  }
  // cuBLASLt's workspace is the model stream's: no other stream uses it.
  VT_CHECK(!on || on == stream_, "cuBLASLt linears run on the model's stream");
  gemm_->matmul(y, x, linear.parts[0].weight.data(), m, linear.n, linear.k, act, stream_);
}

void Qwen35CudaForward::project_branch(const CudaLinear& linear, const void* x, int64_t T, const Fp8Rows& fused) {
  auto& w = *workspace_;
  const DType act = options_.activations;
  w.branch_partials.reset();
  w.branch_pairs.reset();
  if (fp8_gemm_ && !all_reduce_ && !options_.batch_invariant && linear.format == WeightFormat::kFp8Block &&
      linear.parts.size() == 1 &&
      linear.exact_count == 0 && fp8_gemm_->choose_for_norm(T, linear.n, linear.k, act) == cuda::GemmBackend::kWgmmaPartials) {
    Fp8Rows input = fused;
    if (!input.codes) {
      input = {w.scratch.as<uint8_t>(), w.scratch_scales.as<float>()};
      cuda::fp8_quantize_rows(w.scratch.as<uint8_t>(), w.scratch_scales.as<float>(), x, T, linear.k, act, stream_);
    }
    const auto& part = linear.parts[0];
    w.branch_partials = fp8_gemm_->run_partials(input.codes, input.scales, part.weight.as<uint8_t>(),
                                                part.scales.as<float>(), T, linear.n, linear.k, stream_);
    return;
  }
  this->linear(linear, w.branch.data(), x, T, fused);
  reduce_branch(T);
}

cuda::Branch Qwen35CudaForward::branch_input() const {
  const auto& w = *workspace_;
  if (w.branch_partials) return &*w.branch_partials;
  if (w.branch_pairs) return &*w.branch_pairs;
  return w.branch.data();
}

void Qwen35CudaForward::reduce_branch(int64_t num_tokens) {
  if (!all_reduce_) return;
  trace::OpScope op("all_reduce", OpGroup::kCollective);
  all_reduce_(workspace_->branch.data(), num_tokens * config_.hidden_size, options_.activations, stream_);
}

}  // namespace vt
