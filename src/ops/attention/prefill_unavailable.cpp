// prefill_attention where the build found no FlashInfer headers (src/CMakeLists.txt): it serves no
// shape, and the model keeps every token on paged_attention.
#include "core/error.h"
#include "ops/attention/attention.h"

namespace vt::cuda {

bool prefill_attention_supports(const AttentionShape&, DType) {
  return false;
}

int64_t prefill_attention_ctas() {
  return 1;
}

void prefill_attention(void*, void*, const void*, const void*, const void*, const void*,
                       const StepLayout&, const PrefillAttentionPlan&, const int32_t*,
                       const AttentionShape&, cudaStream_t, uint8_t*, float*) {
  VT_FAIL("prefill_attention: built without FlashInfer's headers (scripts/fetch-flashinfer.sh)");
}

}  // namespace vt::cuda
