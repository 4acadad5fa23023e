// The embedding gather (and the row gather of a step's last tokens): CPU reference and CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/stream.h"

namespace vt::cpu {

// out[T, H] = table[ids[t], :] (table in any float dtype).
void embedding(float* out, const int32_t* ids, int64_t num_tokens, const void* table, DType dtype,
               int64_t vocab, int64_t hidden);

}  // namespace vt::cpu

namespace vt::cuda {

// out [T, H] act = table [V, H] (f32/bf16/f16) at ids [T].
void embedding(void* out, DType act, const int32_t* ids, int64_t tokens, const void* table,
               DType table_dtype, int64_t hidden, cudaStream_t stream);

// Gathers rows: out [count, n] = in [index[i], n] (e.g. the last token of each sequence).
void gather_rows(void* out, const void* in, const int32_t* index, int64_t count, int64_t n, DType act,
                 cudaStream_t stream);

}  // namespace vt::cuda
