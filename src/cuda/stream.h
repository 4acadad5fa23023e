// The CUDA stream handle, declared without the CUDA headers so that op headers compile on a
// machine without CUDA.
#pragma once

typedef struct CUstream_st* cudaStream_t;
