// The FP8 block-scaled GEMM backends behind one door, and the choice between them by measurement:
// at start-up every backend that can serve a shape is timed at each M bucket over the model's own
// weights (cycled across layers, so reads come from HBM as in a decode step), the fastest is kept,
// the table is logged and cached on disk (keyed by GPU, vt version, shape), and VT_GEMM_BACKEND
// forces one backend for A/B runs (refused at start-up for a shape it cannot serve); a list of
// excluded backends leaves them out of the tuning (the plan without a backend, for A/B runs).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/device_buffer.h"
#include "ops/gemm/cublaslt_gemm.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/partials.h"
#include "ops/norm/norm.h"

typedef struct CUgraphExec_st* cudaGraphExec_t;

namespace vt::cuda {

// kWgmmaPartials writes no output: it leaves the stream-K split's partials for the norm after it
// (fp8_gemm_wgmma_partials, add_rms_norm), so it serves only GEMMs that feed a norm (run_partials,
// choose_for_norm), and is timed with that norm.
enum class GemmBackend {
  kGemv, kGemvSplitK, kMma, kWgmma, kWgmmaCluster, kCublasLt, kWgmmaPartials
};
constexpr GemmBackend kAllGemmBackends[] = {GemmBackend::kGemv,          GemmBackend::kGemvSplitK, GemmBackend::kMma,
                                            GemmBackend::kWgmma,         GemmBackend::kWgmmaCluster,
                                            GemmBackend::kCublasLt,      GemmBackend::kWgmmaPartials};
// "gemv", "gemv_splitk", "mma", "wgmma", "wgmma_cluster", "cublaslt",
// "wgmma_partials"
const char* gemm_backend_name(GemmBackend backend);
std::optional<GemmBackend> parse_gemm_backend(const std::string& name);
Fp8GemmBackend kernel_backend(GemmBackend backend);  // vt's kernels writing y (not kCublasLt, kWgmmaPartials)
// The kernel a backend launches, for counting it under CUPTI (cuBLASLt: the scale transpose vt
// launches in front of each of its calls; its own kernels' names vary).
const char* gemm_backend_kernel(GemmBackend backend);

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
// [n/128, k/128] scales. feeds_norm: some of its linears' outputs go straight into add_rms_norm
// (o_proj, the GDN out_proj, the MLP down projection), so it is timed with that norm after it and
// kWgmmaPartials competes there.
struct GemmTuneShape {
  int64_t n = 0, k = 0;
  std::vector<std::pair<const uint8_t*, const float*>> weights;
  bool feeds_norm = false;
};

// The norm a GEMM that feeds one is timed with, as the model runs it: residual [m, n] += y, RMSNorm,
// the output's FP8 quantisation for the next linear (add_rms_norm's fused kernel). Its scratch.
class NormConsumer {
 public:
  NormConsumer(int64_t max_m, int64_t n, DType act, cudaStream_t stream);
  void run(Branch branch, int64_t m, cudaStream_t stream);

 private:
  int64_t n_;
  DType act_;
  DeviceBuffer residual_, out_, weight_, codes_, scales_;
};

// How the registry (and `vt bench gemm`) time a GEMM as a decode step runs it: after the kernel
// that makes its FP8 activations and a stand-in of the op before it (cuda::stand_in_kernel, this
// long), both launched as the model's kernels are; their own time, measured alone, is taken off.
// Without the stand-in, a GEMM that cannot start while its predecessor runs (a cluster launch
// under PDL) would look faster alone than it is in the step.
constexpr double kStandInMicroseconds = 3.0;
// The producer of a timed GEMM's activations, as above: quantise `m` x `k` rows of `input`, then
// the stand-in kernel.
void step_producer(uint8_t* codes, float* scales, const void* input, int64_t m, int64_t k, DType act, float* sink,
                   cudaStream_t stream);

class Fp8GemmRegistry {
 public:
  // max_m rows and max_k columns bound every call (the scratch for cuBLASLt's scale layout);
  // outputs up to max_n columns get cuBLASLt's padded path (run()), wider ones the split.
  Fp8GemmRegistry(int64_t max_m, int64_t max_k, const std::vector<std::string>& excluded = {}, int64_t max_n = 0);

  bool supports(GemmBackend backend, int64_t m, int64_t n, int64_t k, int64_t ldy, DType act);
  // Whether kWgmmaPartials serves m x n x k (its output only through run_partials).
  bool supports_partials(int64_t m, int64_t n, int64_t k, DType act);
  // y [m, n] act (row stride ldy) from activation codes [m, k] + scales [m, k/128] (vt's layout).
  // cuBLASLt's FP8 block-scaled algorithms take only some row counts (none for a mixed step's 278
  // rows on the H200, while 272 has one): an m it refuses runs as the next multiple of 16 through
  // private buffers (the rows copied in, the output rows copied out: two copies instead of a
  // second pass over the weights), or, for outputs wider than max_n, its largest multiple of 16
  // rows there and the rest (< 16) on the backend chosen for them.
  void run(GemmBackend backend, void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
           const float* w_scales, int64_t m, int64_t n, int64_t k, DType act, cudaStream_t stream);
  // The partials of y for the norm after it (kWgmmaPartials); valid until the next such call on
  // the stream.
  GemmPartials run_partials(const uint8_t* q, const float* a_scales, const uint8_t* w, const float* w_scales,
                            int64_t m, int64_t n, int64_t k, cudaStream_t stream);
  // The backend for a call: the forced one, else the tuned table's when it serves this m, else
  // the built-in rule (gemv at M = 1, mma above). Never kWgmmaPartials.
  GemmBackend choose(int64_t m, int64_t n, int64_t k, int64_t ldy, DType act);
  // As choose, for a GEMM whose output [m, n] (row stride n) goes straight into add_rms_norm: the
  // table measured with the norm after it, which may say kWgmmaPartials.
  GemmBackend choose_for_norm(int64_t m, int64_t n, int64_t k, DType act);
  // Times each backend that serves (n, k) at each bucket up to max_m, keeps the fastest; reuses
  // the disk cache when it holds every entry. Returns the table as text (for the start-up log).
  std::string tune(const std::vector<GemmTuneShape>& shapes, int64_t max_m, DType act, cudaStream_t stream);
  // The forced backend (VT_GEMM_BACKEND), if any; wgmma_partials forced runs
  // every GEMM that feeds a norm as partials where it serves, the others on wgmma.
  std::optional<GemmBackend> forced() const { return forced_; }

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t>;  // n, k, bucket
  CublasLtGemm cublas_;
  std::map<Key, GemmBackend> norm_table_;  // feeds_norm shapes: the best with the norm after it
  DeviceBuffer scales_t_;  // [k/128, m] for cuBLASLt
  int64_t max_m_, max_k_, max_n_;
  DeviceBuffer padded_a_, padded_y_;  // cuBLASLt's padded rows: [max_m_ to 16, max_k_] codes, [.., max_n_] out
  std::map<Key, GemmBackend> table_;
  std::map<Key, double> measured_us_;
  std::optional<GemmBackend> forced_;
  std::vector<GemmBackend> excluded_;  // left out of the tuning
  std::string excluded_key_;           // "" or "|without a,b": part of the plan cache's keys
  bool excluded(GemmBackend backend) const;
  // The rows of an m-row call cuBLASLt runs (0: it serves none; see run()).
  int64_t cublaslt_rows(int64_t m, int64_t n, int64_t k, int64_t ldy, DType act);
};

}  // namespace vt::cuda
