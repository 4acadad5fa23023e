// Error checks for CUDA runtime calls and kernel launches.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"
#include "trace/intent.h"

#define VT_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    cudaError_t vt_status = (call);                                                          \
    if (vt_status != cudaSuccess)                                                            \
      VT_FAIL(#call, ": ", cudaGetErrorString(vt_status), " [", __FILE__, ":", __LINE__, "]"); \
  } while (0)

// After a launch: checks it and records the intent to run `name` (the kernel's function name).
#define VT_CUDA_CHECK_LAUNCH(name)  \
  do {                              \
    VT_CUDA_CHECK(cudaGetLastError()); \
    ::vt::trace::intend(name);    \
  } while (0)

// The same, with what the launch is for (trace::IntentInfo's fields, in order):
//   VT_CUDA_CHECK_LAUNCH_INTENT("sm90_fp8_gemm_mma_splitk", op, trace::OpGroup::kGemmMlp,
//                               "fp8_mma", {m, n, k}, bytes, 2.0 * m * n * k);
// The fields are evaluated only while intents are being recorded.
#define VT_CUDA_CHECK_LAUNCH_INTENT(name, ...)                                         \
  do {                                                                                 \
    VT_CUDA_CHECK(cudaGetLastError());                                                 \
    if (::vt::trace::intents_active())                                               \
      ::vt::trace::intend(name, ::vt::trace::IntentInfo{__VA_ARGS__});             \
  } while (0)
