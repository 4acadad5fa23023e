// Dense GEMM through cuBLASLt: y [M, N] = x [M, K] @ w [N, K]^T in f32 or bf16 with fp32
// compute (no TF32). Algorithms are chosen once per shape by cuBLASLt's heuristic and cached (or
// chosen by a caller that timed the heuristic's candidates).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;

namespace vt::cuda {

class CublasLtGemm {
 public:
  explicit CublasLtGemm(size_t workspace_bytes = 32u << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // x and w in `dtype`; y in `out_dtype` (defaults to dtype; f32 output from bf16 inputs is
  // allowed, e.g. MoE router logits that must not be rounded to bf16 before top-k).
  void matmul(void* y, const void* x, const void* w, int64_t m, int64_t n, int64_t k, DType dtype,
              cudaStream_t stream, DType out_dtype = DType::kF32, bool out_dtype_given = false);

  // FP8 block-scaled, the checkpoint's own format: y [M, N] out_dtype (row stride ldy) =
  // (x_codes [M, K] e4m3 * x_scales) (w [N, K] e4m3 * w_scales)^T with x_scales_t [K/128, M]
  // (1x128 groups, transposed) and w_scales [N/128, K/128] (128x128 blocks). K % 128 == 0.
  void matmul_fp8_block(void* y, int64_t ldy, const uint8_t* x_codes, const float* x_scales_t, const uint8_t* w,
                        const float* w_scales, int64_t m, int64_t n, int64_t k, DType out_dtype, cudaStream_t stream);
  // Whether cuBLASLt has an algorithm for that FP8 block-scaled shape (it refuses M = 1 on sm90).
  bool supports_fp8_block(int64_t m, int64_t n, int64_t k, int64_t ldy, DType out_dtype);

  // cuBLASLt's heuristic candidates for a shape, for a caller that times them (`vt bench gemm`'s
  // peer is the fastest of them, not the heuristic's first): how many there are (at most `count`;
  // 0 where it has none); choose_*(i) makes candidate i the shape's algorithm from then on.
  int dense_candidates(int64_t m, int64_t n, int64_t k, DType dtype, int count);
  void choose_dense(int64_t m, int64_t n, int64_t k, DType dtype, int index);
  int fp8_block_candidates(int64_t m, int64_t n, int64_t k, int64_t ldy, DType out_dtype, int count);
  void choose_fp8_block(int64_t m, int64_t n, int64_t k, int64_t ldy, DType out_dtype, int index);

 private:
  struct Plan;
  Plan& plan(int64_t m, int64_t n, int64_t k, DType dtype, DType out_dtype);
  Plan* fp8_block_plan(int64_t m, int64_t n, int64_t k, int64_t ldy, DType out_dtype);  // null: unsupported
  void* handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int>, std::unique_ptr<Plan>> plans_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int>, std::unique_ptr<Plan>> fp8_plans_;  // null: refused
};

}  // namespace vt::cuda
