// The compute ceiling a prefill is measured against (vt bench prefill's MFU): cuBLASLt on a large
// square GEMM, the library's best kernel for the precision the model's GEMMs use.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "ops/gemm/cublaslt_gemm.h"
#include "ops/gemm/gemm.h"

namespace vt::cuda {

double measure_gemm_peak_tflops(DType dtype, int64_t size) {
  VT_CHECK(dtype == DType::kF8E4M3 || dtype == DType::kBF16, "GEMM peak: FP8 (e4m3 codes) or bf16");
  VT_CHECK(size >= 128 && size % 128 == 0, "GEMM peak: size a multiple of 128, got ", size);
  const int64_t blocks = size / 128;
  CublasLtGemm gemm;
  DeviceBuffer x(dtype, {size, size}, "GEMM peak x"), w(dtype, {size, size}, "GEMM peak w");
  DeviceBuffer y(DType::kBF16, {size, size}, "GEMM peak y");
  DeviceBuffer x_scales(DType::kF32, {blocks, size}), w_scales(DType::kF32, {blocks, blocks});
  if (dtype == DType::kF8E4M3) {
    fill_random_fp8(x.as<uint8_t>(), size * size, 1, nullptr);
    fill_random_fp8(w.as<uint8_t>(), size * size, 2, nullptr);
    fill_random(x_scales.data(), DType::kF32, blocks * size, 3, 1e-3f, 2e-3f, nullptr);
    fill_random(w_scales.data(), DType::kF32, blocks * blocks, 4, 1e-3f, 2e-3f, nullptr);
  } else {
    fill_random(x.data(), dtype, size * size, 1, 1.0f, 0.0f, nullptr);
    fill_random(w.data(), dtype, size * size, 2, 1.0f, 0.0f, nullptr);
  }
  const auto run = [&] {
    if (dtype == DType::kF8E4M3)
      gemm.matmul_fp8_block(y.data(), size, x.as<uint8_t>(), x_scales.as<float>(), w.as<uint8_t>(),
                            w_scales.as<float>(), size, size, size, DType::kBF16, nullptr);
    else
      gemm.matmul(y.data(), x.data(), w.data(), size, size, size, dtype, nullptr, DType::kBF16, true);
  };
  cudaEvent_t start, stop;
  VT_CUDA_CHECK(cudaEventCreate(&start));
  VT_CUDA_CHECK(cudaEventCreate(&stop));
  run();  // plan and warm-up
  float best_ms = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    VT_CUDA_CHECK(cudaEventRecord(start));
    for (int i = 0; i < 4; ++i) run();
    VT_CUDA_CHECK(cudaEventRecord(stop));
    VT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    VT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms / 4);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * double(size) * double(size) * double(size) / (double(best_ms) * 1e-3) / 1e12;
}

}  // namespace vt::cuda
