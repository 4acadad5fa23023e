// Dense GEMM through cuBLASLt: y [M, N] = x [M, K] @ w [N, K]^T in f32 or bf16 with fp32
// compute (no TF32). Algorithms are chosen once per shape by cuBLASLt's heuristic and cached.
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

 private:
  struct Plan;
  Plan& plan(int64_t m, int64_t n, int64_t k, DType dtype, DType out_dtype);
  void* handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace vt::cuda
