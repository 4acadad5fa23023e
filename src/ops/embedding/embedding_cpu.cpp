// CPU reference: the embedding gather.
#include "core/threading.h"
#include "ops/embedding/embedding.h"

namespace vt::cpu {

void embedding(float* out, const int32_t* ids, int64_t num_tokens, const void* table, DType dtype,
               int64_t vocab, int64_t hidden) {
  (void)vocab;  // ids validated by the caller
  parallel_for(num_tokens, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t i = 0; i < hidden; ++i)
        out[t * hidden + i] = load_as_f32(table, dtype, size_t(ids[t]) * hidden + i);
  });
}

}  // namespace vt::cpu
