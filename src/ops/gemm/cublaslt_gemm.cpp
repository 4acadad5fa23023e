#include "ops/gemm/cublaslt_gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <vector>

#include "cuda/check.h"
#include "cuda/device_buffer.h"
#include "trace/intent.h"

#define VT_CUBLAS_CHECK(call)                                                                \
  do {                                                                                       \
    cublasStatus_t vt_status = (call);                                                       \
    if (vt_status != CUBLAS_STATUS_SUCCESS)                                                  \
      VT_FAIL(#call, ": cuBLAS status ", int(vt_status), " [", __FILE__, ":", __LINE__, "]"); \
  } while (0)

namespace vt::cuda {

namespace {

// What a cuBLASLt GEMM is expected to launch: one Hopper GEMM kernel (its "nvjet*" names vary by
// tile and algorithm, CUPTI records on the H200) and, for split-K algorithms, maybe a reduction.
// `backend`: "cublaslt" (FP8 block-scaled, as `vt bench gemm` names it with "fp8_") or
// "cublaslt_bf16" / "cublaslt_f32" (dense).
void intend_cublaslt(const char* backend, int64_t m, int64_t n, int64_t k, double weight_bytes, double input_bytes,
                     double output_bytes) {
  if (!trace::intents_active()) return;
  const double bytes = weight_bytes + input_bytes + output_bytes;
  trace::intend("nvjet*", trace::LaunchCost{backend, {m, n, k, 0}, bytes, 2.0 * double(m) * double(n) * double(k),
                                                 trace::OpGroup::kGemmOther});
  trace::intend_optional("splitKreduce_kernel",
                           trace::LaunchCost{backend, {m, n, k, 0}, 0, 0, trace::OpGroup::kGemmOther});
}

// A TN plan (A = w transposed, B = x), fp32 compute: row-major y = x w^T as column-major
// y^T [N, M] = w [K, N]^T x^T [K, M], with the output's leading dimension ldy.
void describe_tn(cublasLtMatmulDesc_t* operation, cublasLtMatrixLayout_t* a, cublasLtMatrixLayout_t* b,
                 cublasLtMatrixLayout_t* c, cudaDataType_t in_type, cudaDataType_t out_type, int64_t m, int64_t n,
                 int64_t k, int64_t ldy) {
  VT_CUBLAS_CHECK(cublasLtMatmulDescCreate(operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
  VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(*operation, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(*operation, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof(no_transpose)));
  VT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(a, in_type, uint64_t(k), uint64_t(n), k));
  VT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(b, in_type, uint64_t(k), uint64_t(m), k));
  VT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(c, out_type, uint64_t(n), uint64_t(m), ldy));
}

// cuBLASLt's heuristic candidates within the workspace, best first (at most `count`; none where it
// has none).
std::vector<cublasLtMatmulAlgo_t> heuristic_algorithms(void* handle, cublasLtMatmulDesc_t operation,
                                                       cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                       cublasLtMatrixLayout_t c, size_t workspace_bytes, int count) {
  cublasLtMatmulPreference_t preference;
  VT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  VT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes, sizeof(workspace_bytes)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(size_t(std::max(count, 1)));
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle), operation, a, b,
                                                               c, c, preference, int(results.size()), results.data(),
                                                               &found);
  cublasLtMatmulPreferenceDestroy(preference);
  std::vector<cublasLtMatmulAlgo_t> algorithms;
  if (status != CUBLAS_STATUS_SUCCESS) return algorithms;
  for (int i = 0; i < found; ++i)
    if (results[size_t(i)].state == CUBLAS_STATUS_SUCCESS && results[size_t(i)].workspaceSize <= workspace_bytes)
      algorithms.push_back(results[size_t(i)].algo);
  return algorithms;
}

// cuBLASLt's first heuristic choice within the workspace; false when it has none.
bool pick_algorithm(void* handle, cublasLtMatmulDesc_t operation, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                    cublasLtMatrixLayout_t c, size_t workspace_bytes, cublasLtMatmulAlgo_t* algorithm) {
  const std::vector<cublasLtMatmulAlgo_t> algorithms = heuristic_algorithms(handle, operation, a, b, c, workspace_bytes, 1);
  if (algorithms.empty()) return false;
  *algorithm = algorithms.front();
  return true;
}

}  // namespace

struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // filled by *_candidates()
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (operation) cublasLtMatmulDescDestroy(operation);
  }
};

CublasLtGemm::CublasLtGemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t handle;
  VT_CUBLAS_CHECK(cublasLtCreate(&handle));
  handle_ = handle;
  workspace_ = device_alloc(workspace_bytes_);
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  fp8_plans_.clear();
  if (workspace_) device_free(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

// Row-major y = x w^T is column-major y^T [N, M] = w [K, N]^T x^T [K, M]: A = w (transposed),
// B = x, C = y, all with leading dimension K (A, B) and N (C).
CublasLtGemm::Plan& CublasLtGemm::plan(int64_t m, int64_t n, int64_t k, DType dtype, DType out_dtype) {
  auto key = std::make_tuple(m, n, k, int(dtype), int(out_dtype));
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  VT_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "cuBLASLt gemm: dtype ", dtype_name(dtype));
  VT_CHECK(out_dtype == dtype || out_dtype == DType::kF32, "cuBLASLt gemm: output ", dtype_name(out_dtype));
  const cudaDataType_t type = dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t out_type = out_dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  auto plan = std::make_unique<Plan>();
  describe_tn(&plan->operation, &plan->a, &plan->b, &plan->c, type, out_type, m, n, k, n);
  VT_CHECK(pick_algorithm(handle_, plan->operation, plan->a, plan->b, plan->c, workspace_bytes_, &plan->algorithm),
           "cuBLASLt has no algorithm for m=", m, " n=", n, " k=", k, " ", dtype_name(dtype));
  return *(plans_[key] = std::move(plan));
}

void CublasLtGemm::matmul(void* y, const void* x, const void* w, int64_t m, int64_t n, int64_t k, DType dtype,
                          cudaStream_t stream, DType out_dtype, bool out_dtype_given) {
  if (m == 0 || n == 0) return;
  Plan& p = plan(m, n, k, dtype, out_dtype_given ? out_dtype : dtype);
  const double in_size = double(dtype_size(dtype)), out_size = double(dtype_size(out_dtype_given ? out_dtype : dtype));
  intend_cublaslt(dtype == DType::kBF16 ? "cublaslt_bf16" : dtype == DType::kF32 ? "cublaslt_f32" : "cublaslt_dense", m,
                  n, k, double(n) * double(k) * in_size, double(m) * double(k) * in_size, double(m) * double(n) * out_size);
  const float alpha = 1.0f, beta = 0.0f;
  VT_CUBLAS_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.operation, &alpha, w, p.a, x, p.b, &beta,
                                 y, p.c, y, p.c, &p.algorithm, workspace_, workspace_bytes_, stream));
}

// As plan(), for e4m3 A (= w, 128x128 block scales) and B (= x, 1x128 scales along K), with the
// output's leading dimension ldy. cuBLASLt's scale layouts: A's [N/128][K/128] as vt stores the
// checkpoint's weight_scale_inv; B's [K/128][M] (transposed from vt's per-row layout).
CublasLtGemm::Plan* CublasLtGemm::fp8_block_plan(int64_t m, int64_t n, int64_t k, int64_t ldy, DType out_dtype) {
  auto key = std::make_tuple(m, n, k, ldy, int(out_dtype));
  auto it = fp8_plans_.find(key);
  if (it != fp8_plans_.end()) return it->second.get();
  VT_CHECK(out_dtype == DType::kF32 || out_dtype == DType::kBF16, "cuBLASLt fp8 gemm: output ", dtype_name(out_dtype));
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t out_type = out_dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  describe_tn(&plan->operation, &plan->a, &plan->b, &plan->c, CUDA_R_8F_E4M3, out_type, m, n, k, ldy);
  const cublasLtMatmulMatrixScale_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                    b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
  VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
  // Placeholder scale pointers for the heuristic (the real ones are set per call).
  const void* placeholder = workspace_;
  VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder, sizeof(placeholder)));
  VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder, sizeof(placeholder)));
  if (!pick_algorithm(handle_, plan->operation, plan->a, plan->b, plan->c, workspace_bytes_, &plan->algorithm)) {
    fp8_plans_[key] = nullptr;
    return nullptr;
  }
  return (fp8_plans_[key] = std::move(plan)).get();
}

bool CublasLtGemm::supports_fp8_block(int64_t m, int64_t n, int64_t k, int64_t ldy, DType out_dtype) {
  return m > 0 && n > 0 && k % 128 == 0 && fp8_block_plan(m, n, k, ldy, out_dtype) != nullptr;
}

int CublasLtGemm::dense_candidates(int64_t m, int64_t n, int64_t k, DType dtype, int count) {
  Plan& p = plan(m, n, k, dtype, dtype);
  p.candidates = heuristic_algorithms(handle_, p.operation, p.a, p.b, p.c, workspace_bytes_, count);
  return int(p.candidates.size());
}

void CublasLtGemm::choose_dense(int64_t m, int64_t n, int64_t k, DType dtype, int index) {
  Plan& p = plan(m, n, k, dtype, dtype);
  VT_CHECK(index >= 0 && size_t(index) < p.candidates.size(), "cuBLASLt candidate ", index, " of ",
           p.candidates.size());
  p.algorithm = p.candidates[size_t(index)];
}

int CublasLtGemm::fp8_block_candidates(int64_t m, int64_t n, int64_t k, int64_t ldy, DType out_dtype, int count) {
  if (!supports_fp8_block(m, n, k, ldy, out_dtype)) return 0;
  Plan* p = fp8_block_plan(m, n, k, ldy, out_dtype);
  p->candidates = heuristic_algorithms(handle_, p->operation, p->a, p->b, p->c, workspace_bytes_, count);
  return int(p->candidates.size());
}

void CublasLtGemm::choose_fp8_block(int64_t m, int64_t n, int64_t k, int64_t ldy, DType out_dtype, int index) {
  Plan* p = fp8_block_plan(m, n, k, ldy, out_dtype);
  VT_CHECK(p && index >= 0 && size_t(index) < p->candidates.size(), "cuBLASLt FP8 candidate ", index);
  p->algorithm = p->candidates[size_t(index)];
}

void CublasLtGemm::matmul_fp8_block(void* y, int64_t ldy, const uint8_t* x_codes, const float* x_scales_t,
                                    const uint8_t* w, const float* w_scales, int64_t m, int64_t n, int64_t k,
                                    DType out_dtype, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  Plan* p = fp8_block_plan(m, n, k, ldy, out_dtype);
  VT_CHECK(p, "cuBLASLt has no FP8 block-scaled algorithm for m=", m, " n=", n, " k=", k);
  VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->operation, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)));
  VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->operation, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales_t, sizeof(x_scales_t)));
  const double k_blocks = double((k + 127) / 128), n_blocks = double((n + 127) / 128);
  intend_cublaslt("cublaslt", m, n, k, double(n) * double(k) + n_blocks * k_blocks * 4, double(m) * double(k) + double(m) * k_blocks * 4,
                  double(m) * double(n) * double(dtype_size(out_dtype)));
  const float alpha = 1.0f, beta = 0.0f;
  VT_CUBLAS_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p->operation, &alpha, w, p->a, x_codes, p->b,
                                 &beta, y, p->c, y, p->c, &p->algorithm, workspace_, workspace_bytes_, stream));
}

}  // namespace vt::cuda
