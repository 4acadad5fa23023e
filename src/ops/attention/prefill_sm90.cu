// Prefill attention on the tensor cores: FlashInfer's sm90 FA3-style kernel (warp-specialised
// wgmma, a producer warpgroup gathering K/V pages with cp.async, the online softmax in registers;
// taken from the flashinfer-python wheel at build time, scripts/fetch-flashinfer.sh) over our
// paged cache [blocks, block_size, Hkv, D], causal GQA with each sequence's queries right-aligned
// to its keys (a cached prefix before them), then the sigmoid output gate and the o_proj's FP8
// codes in a small kernel of ours.
#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "ops/attention/attention.h"
#include "ops/attention/prefill_plan.h"
#include "trace/intent.h"

namespace vt::cuda {
namespace {

using Element = cutlass::bfloat16_t;
using PagedParams = flashinfer::BatchPrefillPagedParams<Element, Element, Element, int32_t>;
constexpr int kHeadDim = 256;
constexpr int kGateThreads = 128, kGateElements = kHeadDim / kGateThreads;

// Block (token of the run, query head): out = attention x sigmoid(gate), rounded to bf16; with
// q_codes set, each 128-group's FP8 quantisation for the o_proj (as sm90_attention_combine).
__global__ void __launch_bounds__(kGateThreads)
    sm90_prefill_attention_gate_bf16(__nv_bfloat16* out, const __nv_bfloat16* attention,
                                     const __nv_bfloat16* gate, int64_t first_token,
                                     int64_t num_heads, uint8_t* q_codes, float* q_scales) {
  __shared__ float s_scratch[kGateThreads / 32];
  device::pdl_enter();
  const int64_t row = ((first_token + blockIdx.x) * num_heads + blockIdx.y) * kHeadDim;
#pragma unroll
  for (int e = 0; e < kGateElements; ++e) {
    const int64_t element = row + threadIdx.x + e * kGateThreads;
    const __nv_bfloat16 result = __float2bfloat16_rn(
        __bfloat162float(attention[element]) * device::sigmoid(__bfloat162float(gate[element])));
    out[element] = result;
    if (q_codes) {
      const float rounded = __bfloat162float(result);
      const float scale = fmaxf(device::block_max(fabsf(rounded), s_scratch), 1e-10f) / 448.0f;
      q_codes[element] = __nv_fp8_e4m3(fminf(fmaxf(rounded / scale, -448.0f), 448.0f)).__x;
      if (threadIdx.x == 0) q_scales[element / 128] = scale;
    }
  }
}

int64_t device_sms() {
  int device = 0, sms = 0;
  VT_CUDA_CHECK(cudaGetDevice(&device));
  VT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace

bool prefill_attention_supports(const AttentionShape& shape, DType act) {
  return act == DType::kBF16 && shape.head_dim == kHeadDim && shape.num_kv_heads >= 1 &&
         shape.num_heads % shape.num_kv_heads == 0 && shape.block_size >= 1;
}

int64_t prefill_attention_ctas() {
  return device_sms();
}

void prefill_attention(void* out, void* attention, const void* q, const void* gate,
                       const void* k_cache, const void* v_cache, const StepLayout& layout,
                       const PrefillAttentionPlan& plan, const int32_t* plan_device,
                       const AttentionShape& shape, cudaStream_t stream, uint8_t* q_codes,
                       float* q_scales) {
  VT_CHECK(prefill_attention_supports(shape, DType::kBF16), "prefill_attention: ", shape.num_heads,
           "/", shape.num_kv_heads, " heads of ", shape.head_dim, " (bf16, head_dim 256)");
  VT_CHECK(plan.num_heads() == shape.num_heads, "prefill_attention: a plan for ", plan.num_heads(),
           " heads, not ", shape.num_heads);
  VT_CHECK(plan.ctas() == device_sms(), "prefill_attention: a plan for ", plan.ctas(),
           " CTAs on a device of ", device_sms(), " SMs");
  if (plan.works() == 0) return;
  const int64_t hq = shape.num_heads, hkv = shape.num_kv_heads, d = shape.head_dim;

  PagedParams params{};
  params.q_ptr = static_cast<Element*>(const_cast<void*>(q));
  params.k_ptr = static_cast<Element*>(const_cast<void*>(k_cache));
  params.v_ptr = static_cast<Element*>(const_cast<void*>(v_cache));
  params.o_ptr = static_cast<Element*>(attention);
  params.lse_ptr = nullptr;
  int32_t* packed = const_cast<int32_t*>(plan_device);
  params.work_indptr = packed;
  params.qo_tile_indices = packed + plan.offset(PrefillAttentionPlan::kQTile);
  params.qo_indptr = packed + plan.offset(PrefillAttentionPlan::kQOffset);
  params.kv_indptr = packed + plan.offset(PrefillAttentionPlan::kKvOffset);
  params.qo_lens = packed + plan.offset(PrefillAttentionPlan::kQLen);
  params.kv_lens = packed + plan.offset(PrefillAttentionPlan::kKvLen);
  params.head_indices = packed + plan.offset(PrefillAttentionPlan::kHead);
  params.batch_indices = packed + plan.offset(PrefillAttentionPlan::kSequence);
  // A work item's pages: kv_indices[kv_indptr ...], its sequence's row of the block table.
  params.kv_indices = const_cast<int32_t*>(layout.block_tables);
  params.additional_params.logits_soft_cap = 0.0f;
  params.additional_params.sm_scale = 1.0f / sqrtf(float(d));
  params.additional_params.maybe_prefix_len_ptr = nullptr;
  params.additional_params.maybe_token_pos_in_items_ptr = nullptr;
  params.additional_params.token_pos_in_items_len = 0;
  params.additional_params.maybe_max_item_len_ptr = nullptr;
  params.q_stride_n = hq * d;
  params.q_stride_h = d;
  params.o_stride_n = hq * d;
  params.o_stride_h = d;
  params.k_stride_n = params.v_stride_n = hkv * d;  // [blocks, block_size, Hkv, D]
  params.k_stride_h = params.v_stride_h = d;
  params.k_page_stride = params.v_page_stride = shape.block_size * hkv * d;
  params.nnz_qo = layout.num_tokens;  // the extent of q's TMA descriptor
  params.num_qo_heads = int(hq);
  params.num_kv_heads = int(hkv);
  params.group_size = int(hq / hkv);
  params.page_size = int(shape.block_size);
  params.window_left = -1;
  params.causal = true;

  // What the launch must move at least (K and V once per KV head, q and the output) and its
  // FLOPs (QK^T and PV over each token's visible keys).
  double visible = 0, keys = 0;
  for (int64_t s = 0; s < plan.num_sequences(); ++s) {
    const PrefillSequence& sequence = plan.sequences()[s];
    const double n = sequence.num_tokens, start = double(sequence.num_keys) - n;
    visible += n * start + n * (n + 1) / 2;
    keys += sequence.num_keys;
  }
  const double tokens = double(plan.tokens());
  const ::vt::trace::LaunchCost cost{
      "flashinfer",
      {plan.tokens(), hq, hkv, d},
      keys * double(hkv * d) * 2 * 2 + tokens * double(hq * d) * 2 * 2,
      4.0 * visible * double(hq * d),
      ::vt::trace::OpGroup::kAttention};
  // FlashInfer's own tile choice for the paged kernel at head_dim 256 (CTA_Q 128, CTA_KV 32).
  const cudaError_t status = flashinfer::BatchPrefillWithPagedKVCacheDispatched<
      kHeadDim, kHeadDim, flashinfer::MaskMode::kCausal,
      /*LEFT_SLIDING_WINDOW=*/false,
      /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false, flashinfer::StandardAttention>(
      params, /*enable_pdl=*/false, stream);
  VT_CHECK(status == cudaSuccess, "FlashInfer sm90 prefill: ", cudaGetErrorString(status));
  ::vt::trace::intend("PrefillWithKVCacheKernel", cost);

  // The gate over each run of adjacent planned sequences' tokens.
  const PrefillSequence* sequences = plan.sequences();
  for (int64_t s = 0; s < plan.num_sequences();) {
    const int64_t first = sequences[s].first_token;
    int64_t end = first + sequences[s].num_tokens;
    for (++s; s < plan.num_sequences() && sequences[s].first_token == end; ++s)
      end += sequences[s].num_tokens;
    const ::vt::trace::LaunchCost gate_cost{"cuda",
                                            {end - first, hq, d, 0},
                                            double(end - first) * double(hq * d) * 2 * 3,
                                            0,
                                            ::vt::trace::OpGroup::kAttention};
    launch("sm90_prefill_attention_gate_bf16", gate_cost, sm90_prefill_attention_gate_bf16,
           dim3(unsigned(end - first), unsigned(hq)), dim3(kGateThreads), 0, stream,
           static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(attention),
           static_cast<const __nv_bfloat16*>(gate), first, hq, q_codes, q_scales);
  }
}

}  // namespace vt::cuda
