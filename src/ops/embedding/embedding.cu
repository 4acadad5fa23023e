// Embedding gather and row gather on the device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/embedding/embedding.h"

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;


template <typename T>
__global__ void sm90_embedding(T* __restrict__ g_out, const int32_t* __restrict__ g_ids, const void* g_table,
                               int table_dtype, int64_t hidden) {
  device::pdl_enter();
  const int64_t row = g_ids[blockIdx.x];
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    g_out[blockIdx.x * hidden + i] = device::from_float<T>(device::load_any(g_table, table_dtype, row * hidden + i));
}

template <typename T>
__global__ void sm90_gather_rows(T* __restrict__ g_out, const T* __restrict__ g_in, const int32_t* __restrict__ g_index,
                                 int64_t n) {
  device::pdl_enter();
  const int64_t source = g_index[blockIdx.x];
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) g_out[blockIdx.x * n + i] = g_in[source * n + i];
}

}  // namespace

void embedding(void* out, DType act, const int32_t* ids, int64_t tokens, const void* table, DType table_dtype,
               int64_t hidden, cudaStream_t stream) {
  if (tokens == 0) return;
  const int code = dtype_code(table_dtype);
  const double row_bytes = double(hidden) * double(dtype_size(table_dtype) + dtype_size(act));
  const ::vt::trace::LaunchCost cost{"cuda", {tokens, hidden, 0, 0}, double(tokens) * row_bytes, 0,
                                       ::vt::trace::OpGroup::kEmbed};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_embedding", cost, sm90_embedding<T>, dim3(unsigned(tokens)), dim3(kThreads), 0, stream,
                         static_cast<T*>(out), ids, table, code, hidden));
}

void gather_rows(void* out, const void* in, const int32_t* index, int64_t count, int64_t n, DType act,
                 cudaStream_t stream) {
  if (count == 0) return;
  const ::vt::trace::LaunchCost cost{"cuda", {count, n, 0, 0}, 2.0 * double(count * n) * double(dtype_size(act)), 0,
                                       ::vt::trace::OpGroup::kOther};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_gather_rows", cost, sm90_gather_rows<T>, dim3(unsigned(count)), dim3(kThreads), 0, stream,
                         static_cast<T*>(out), static_cast<const T*>(in), index, n));
}

}  // namespace vt::cuda
