// The Qwen3.5 / Qwen3-Next multi-token-prediction head on CUDA, top to bottom as the CPU
// reference's (mtp.cpp), which it is tested against:
//   x = fc([norm_e(embed(token)) | norm_h(hidden)])     hidden: the target's lm_head input at p
//   x += attention(norm(x));  x += ffn(norm(x))           the decoder layer's kernels, its own KV cache
//   out = norm(x);  logits = lm_head(out)                 predicts the token at p + 2
// The runner keeps the hidden states on the device and the head's sequences (runtime/).
#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/check.h"
#include "models/qwen3_5/cuda_model.h"
#include "models/qwen3_5/cuda_workspace.h"
#include "ops/embedding/embedding.h"
#include "ops/gemm/gemm.h"
#include "ops/norm/norm.h"
#include "trace/intent.h"

namespace vt {

using trace::OpGroup;

size_t CudaMtp::bytes() const {
  size_t total = fc.bytes() + layer.qkv.bytes() + layer.o_proj.bytes() + layer.mlp.gate_up.bytes() +
                 layer.mlp.down.bytes() + layer.moe.router.bytes() +
                 layer.moe.expert_bytes() * size_t(layer.moe.stacked()) + layer.moe.shared.gate_up.bytes() +
                 layer.moe.shared.down.bytes() + layer.moe.shared_gate.bytes();
  for (const cuda::DeviceBuffer* vector : {&pre_fc_norm_embedding, &pre_fc_norm_hidden, &norm, &layer.input_norm,
                                           &layer.post_attention_norm, &layer.q_norm, &layer.k_norm})
    total += vector->bytes();
  return total;
}

void Qwen35CudaForward::run_mtp_step(const CudaStep& step, const void* hidden, const LayerCache& head,
                                     void* output_row) {
  VT_CHECK(has_mtp(), "MTP: ", config_.architecture, " was loaded without its MTP head (load_mtp)");
  auto& w = *workspace_;
  const CudaMtp& mtp = *weights_.mtp;
  const DType act = options_.activations;
  const int64_t H = config_.hidden_size, T = step.num_tokens;
  const float eps = config_.rms_norm_eps;
  embed("mtp.embed", step);
  {
    // fc input per row: [norm_e(embed(token)) | norm_h(hidden)], [T, 2H].
    trace::OpScope op("mtp.pre_fc_norm", OpGroup::kNorm);
    cuda::rms_norm_concat(w.projected.data(), w.x.data(), mtp.pre_fc_norm_embedding.as<float>(), hidden,
                          mtp.pre_fc_norm_hidden.as<float>(), T, H, eps, 1.0f, act, stream_);
  }
  {
    trace::OpScope op("mtp.fc", OpGroup::kGemmOther);
    linear(mtp.fc, w.x.data(), w.projected.data(), T);
  }
  const Fp8Rows mixer_in = input_norm(mtp.layer, T, nullptr);
  plan_attention(step);
  attention(mtp.layer, head, step, mixer_in);
  ffn(mtp.layer, T);
  {
    trace::OpScope op("mtp.norm", OpGroup::kNorm);
    cuda::add_rms_norm(w.normed.data(), w.x.data(), branch_input(), mtp.norm.as<float>(), T, H, eps, 1.0f, act,
                       stream_);
  }
  // The last pair's output: the logits' input (at the start of last_hidden, aligned as the GEMMs
  // want) and the slot's row, which chains the next draft.
  cuda::gather_rows(w.last_hidden.data(), w.normed.data(), step.last_index, 1, H, act, stream_);
  VT_CUDA_CHECK(cudaMemcpyAsync(output_row, w.last_hidden.data(), size_t(H) * dtype_size(act),
                                cudaMemcpyDeviceToDevice, stream_));
  trace::OpScope op("mtp.lm_head", OpGroup::kGemmLmHead);
  linear(weights_.lm_head, w.logits.data(), w.last_hidden.data(), 1);
}

}  // namespace vt
