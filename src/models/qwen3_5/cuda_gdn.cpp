// The Gated DeltaNet mixer of one layer (Qwen35CudaForward::gated_delta_net): the in_proj GEMM with
// the b/a projection beside it on the side stream, the causal conv, the delta rule (token by token,
// or in chunks for long prefill sequences) and out_proj into branch.
#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/check.h"
#include "models/qwen3_5/cuda_model.h"
#include "models/qwen3_5/cuda_workspace.h"
#include "ops/gdn/gdn.h"
#include "ops/gemm/gemm.h"
#include "ops/step_layout.h"
#include "trace/intent.h"

namespace vt {

using trace::OpGroup;

void Qwen35CudaForward::gated_delta_net(const CudaLayer& layer, const LayerCache& cache, const CudaStep& step,
                                        const Fp8Rows& mixer_in, int64_t chunked_from) {
  auto& w = *workspace_;
  const auto& c = config_;
  const DType act = options_.activations;
  const int64_t T = step.num_tokens;
  const cuda::StepLayout& layout = step.layout;
  const cuda::DeltaNetShape delta_net{c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
                                      c.linear_value_head_dim, c.linear_conv_kernel, c.rms_norm_eps};
  // FP8 activations made by the op before a W8A8 linear (CudaModelOptions::fuse_fp8_quantization).
  const auto fp8 = [&](const CudaLinear& linear) { return fused_fp8(linear); };
  const Fp8Rows none, inner_q{w.inner.as<uint8_t>(), w.inner_scales.as<float>()};
  const auto codes = [](bool fused, const Fp8Rows& rows) { return fused ? rows : Fp8Rows{}; };
  const int64_t stride = layer.in_proj.n;  // [qkv | z]
  // The b/a projection (a dense GEMV at decode) on the side stream, beside the in_proj GEMM and
  // the conv, up to 8 rows; joined before the delta rule reads it. Wider, the staged kernel needs
  // 160 KB of shared memory and cannot run beside the GEMM, so those rows run in line.
  const CudaLinear& ba = layer.in_proj_ba;
  constexpr int64_t kBesideRows = 8;
  const bool beside = side_stream_ && T <= kBesideRows && ba.format == WeightFormat::kDense &&
                      ba.n <= kNarrowDense && cuda::dense_gemv_supports(T, ba.n, ba.k, act);
  {
    trace::OpScope op("gdn.in_proj", OpGroup::kGemmGdnIn);
    if (beside) {
      VT_CUDA_CHECK(cudaEventRecord(fork_event_, stream_));
      VT_CUDA_CHECK(cudaStreamWaitEvent(side_stream_, fork_event_));
      linear(ba, w.ba.data(), w.normed.data(), T, none, side_stream_);
      VT_CUDA_CHECK(cudaEventRecord(join_event_, side_stream_));
    }
    linear(layer.in_proj, w.projected.data(), w.normed.data(), T, mixer_in);
    if (!beside) linear(ba, w.ba.data(), w.normed.data(), T, fp8(ba) ? mixer_in : none);
  }
  trace::OpScope gdn_op("gdn", OpGroup::kGdn);
  // Verify steps also save each token's state into the rollback window (never in a graph).
  const auto window = [&](float* states) {
    return step.writes_window ? cuda::GdnWindow{states, step.window_entry, step.window_entries} : cuda::GdnWindow{};
  };
  cuda::gdn_conv(w.conv_out.as<float>(), cache.conv, w.projected.data(), stride,
                 layer.conv_weight.as<float>(), layout, delta_net, act, stream_, window(cache.conv_window));
  if (beside) VT_CUDA_CHECK(cudaStreamWaitEvent(stream_, join_event_));
  const Fp8Rows out_in = codes(fp8(layer.out_proj) && c.linear_value_head_dim == 128, inner_q);
  const cuda::GdnArgs core{w.mixer_out.data(), cache.recurrent, w.conv_out.as<float>(), w.projected.data(), stride,
                           c.conv_dim(), w.ba.data(), layer.a_log.as<float>(), layer.dt_bias.as<float>(),
                           layer.gdn_norm.as<float>(), layout, delta_net, const_cast<uint8_t*>(out_in.codes),
                           const_cast<float*>(out_in.scales)};
  if (chunked_from == 0) {
    cuda::gdn_recurrent(core, act, stream_, window(cache.recurrent_window));
  } else {
    // Short sequences (decode tokens) token by token, the long ones in chunks.
    if (step.shortest_seq < chunked_from) cuda::gdn_recurrent(core, act, stream_, {}, chunked_from);
    cuda::gdn_chunked(core, act, stream_, w.gdn_chunk_scratch.as<float>(), w.gdn_chunk_scratch.shape().numel(),
                      chunked_from);
  }
  tap(step, "gdn_out", int(&layer - weights_.layers.data()), w.mixer_out.data(), c.linear_value_dim());
  trace::OpScope out_op("gdn.out_proj", OpGroup::kGemmOut);
  project_branch(layer.out_proj, w.mixer_out.data(), T, out_in);
}

}  // namespace vt
