// The FP8 block-scaled GEMM backends behind one door, and the choice between them by measurement:
// at start-up every backend that can serve a shape is timed at each M bucket over the model's own
// weights (cycled across layers, so reads come from HBM as in a decode step), the fastest is kept,
// the table is logged and cached on disk (keyed by GPU, vt version, shape), and VT_GEMM_BACKEND
// (or the older VT_FP8_GEMM=gemv|simple|mma, simple being warp_rows) forces one backend for A/B
// runs (refused at start-up for a shape it cannot serve); VT_GEMM_EXCLUDE=a,b leaves backends out of
// the tuning (the plan as it was without a backend, measured in the same run).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/device_buffer.h"

typedef struct CUgraphExec_st* cudaGraphExec_t;

namespace vt::cuda {

enum class GemmBackend { kGemv, kGemvSplitK, kGemvTma, kWarpRows, kMma, kWgmma, kWgmmaCluster, kCublasLt };
constexpr GemmBackend kAllGemmBackends[] = {GemmBackend::kGemv,     GemmBackend::kGemvSplitK,    GemmBackend::kGemvTma,
                                            GemmBackend::kWarpRows, GemmBackend::kMma,           GemmBackend::kWgmma,
                                            GemmBackend::kWgmmaCluster, GemmBackend::kCublasLt};
// "gemv", "gemv_splitk", "gemv_tma", "warp_rows", "mma", "wgmma", "wgmma_cluster", "cublaslt"
const char* gemm_backend_name(GemmBackend backend);
std::optional<GemmBackend> parse_gemm_backend(const std::string& name);
Fp8GemmBackend kernel_backend(GemmBackend backend);  // vt's kernels (not kCublasLt)

// Timing as a decode step runs GEMMs: `calls` back-to-back calls of call(i) captured into one
// CUDA graph (plans and lazy loads must be made before), launched once to warm up, then timed over
// one launch; returns microseconds per call. The graph is left in *exec when exec is not null (the
// caller destroys it), else destroyed.
double time_in_graph(cudaStream_t stream, int64_t calls, const std::function<void(int64_t)>& call,
                     cudaGraphExec_t* exec = nullptr);

// M buckets a choice is made for; a GEMM of m rows uses the bucket of the smallest bound >= m.
constexpr int64_t kGemmBuckets[] = {1, 4, 8, 16, 32, 64, 128};
int64_t gemm_bucket(int64_t m);

// One weight shape to tune: its instances in the model (one per layer), all [n, k] e4m3 with
// [n/128, k/128] scales.
struct GemmTuneShape {
  int64_t n = 0, k = 0;
  std::vector<std::pair<const uint8_t*, const float*>> weights;
};

// How the registry (and `vt bench gemm`) time a GEMM as a decode step runs it: after the kernel
// that makes its FP8 activations and a stand-in of the op before it (cuda::stand_in_kernel, this
// long), both launched as the model's kernels are; their own time, measured alone, is taken off.
// Without the stand-in, a GEMM that cannot start while its predecessor runs (a cluster launch
// under PDL) measured 0.3 us faster per call than the persistent split and ran 1 us slower in the
// step (docs/perf/2026-12-02-wgmma-cluster.md).
constexpr double kStandInMicroseconds = 3.0;
// The producer of a timed GEMM's activations, as above: quantise `m` x `k` rows of `input`, then
// the stand-in kernel.
void step_producer(uint8_t* codes, float* scales, const void* input, int64_t m, int64_t k, DType act, float* sink,
                   cudaStream_t stream);

class Fp8GemmRegistry {
 public:
  // max_m rows and max_k columns bound every call (the scratch for cuBLASLt's scale layout).
  Fp8GemmRegistry(int64_t max_m, int64_t max_k);

  bool supports(GemmBackend backend, int64_t m, int64_t n, int64_t k, int64_t ldy, DType act);
  // y [m, n] act (row stride ldy) from activation codes [m, k] + scales [m, k/128] (vt's layout).
  void run(GemmBackend backend, void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
           const float* w_scales, int64_t m, int64_t n, int64_t k, DType act, cudaStream_t stream);
  // The backend for a call: the forced one, else the tuned table's when it serves this m, else
  // the built-in rule (gemv at M = 1, mma above).
  GemmBackend choose(int64_t m, int64_t n, int64_t k, int64_t ldy, DType act);
  // Times each backend that serves (n, k) at each bucket up to max_m, keeps the fastest; reuses
  // the disk cache when it holds every entry. Returns the table as text (for the start-up log).
  std::string tune(const std::vector<GemmTuneShape>& shapes, int64_t max_m, DType act, cudaStream_t stream);
  // The forced backend (VT_GEMM_BACKEND or VT_FP8_GEMM), if any.
  std::optional<GemmBackend> forced() const { return forced_; }

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t>;  // n, k, bucket
  CublasLtGemm cublas_;
  DeviceBuffer scales_t_;  // [k/128, m] for cuBLASLt
  int64_t max_m_, max_k_;
  std::map<Key, GemmBackend> table_;
  std::map<Key, double> measured_us_;
  std::optional<GemmBackend> forced_;
  std::vector<GemmBackend> excluded_;  // VT_GEMM_EXCLUDE
  std::string excluded_key_;           // "" or "|without a,b": part of the plan cache's keys
  bool excluded(GemmBackend backend) const;
};

}  // namespace vt::cuda
