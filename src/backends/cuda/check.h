// Error checks for CUDA runtime calls and kernel launches.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define VT_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    cudaError_t vt_status = (call);                                                          \
    if (vt_status != cudaSuccess)                                                            \
      VT_FAIL(#call, ": ", cudaGetErrorString(vt_status), " [", __FILE__, ":", __LINE__, "]"); \
  } while (0)

#define VT_CUDA_CHECK_LAUNCH(name) VT_CUDA_CHECK(cudaGetLastError())
