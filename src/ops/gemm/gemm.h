// Linear layers: the CPU reference (f32 GEMM, FP8 quantisation) and the CUDA FP8 block-scaled
// GEMM backends, the small dense GEMV, an FP8 output layer's exact columns, and the floors they
// are measured against. The backends' registry is registry.h, cuBLASLt cublaslt_gemm.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "cuda/stream.h"
#include "ops/gemm/partials.h"

namespace vt::cpu {

// y[M, N] = x[M, K] @ w[N, K]^T (+ y if accumulate).
void matmul_nt(float* y, const float* x, const float* w, int64_t m, int64_t n, int64_t k,
               bool accumulate = false);

// Dynamic FP8 activation quantisation, per row in groups of 128 along K (last group partial):
// scale = max(absmax, 1e-10) / 448, q = e4m3(clamp(x / scale)); writes q * scale.
void fp8_quant_dequant_rows(float* out, const float* x, int64_t rows, int64_t k, int64_t group);

// Dequantises an E4M3 weight [N, K] with block scales [ceil(N/bn), ceil(K/bk)] into f32.
void fp8_block_dequant(float* out, const uint8_t* w, const void* scales, DType scale_dtype,
                       int64_t n, int64_t k, int64_t block_n, int64_t block_k);

}  // namespace vt::cpu

namespace vt::cuda {

// ---- FP8 block-scaled linear (W8A8, activations 1x128 per token, weights 128x128 blocks) ----

// x [M, K] act -> q [M, K] e4m3 and scales [M, ceil(K/128)] f32 (scale = max(absmax,1e-10)/448).
void fp8_quantize_rows(uint8_t* q, float* scales, const void* x, int64_t m, int64_t k, DType act,
                       cudaStream_t stream);
// Activation scales [M, KB] -> [KB, ld] (ld >= M; the layout cuBLASLt's 1x128 block scaling
// reads). (`n`: the GEMM's, so profiles file the transpose under the GEMM's m x n x k.)
void transpose_scales(float* out, const float* in, int64_t m, int64_t kb, int64_t n, cudaStream_t stream,
                      int64_t ld = 0);
// w [N, K] (f32/bf16) -> e4m3 codes [N, K] and 128x128 block scales [ceil(N/128), ceil(K/128)]
// (scale = absmax / 448 per block): how a BF16 checkpoint tensor becomes an FP8 one at load.
void fp8_quantize_weight_blocks(uint8_t* q, float* scales, const void* w, DType dtype, int64_t n, int64_t k,
                                cudaStream_t stream);
// y [M, N] act (row stride ldy) = (q * a_scale) @ (w * w_scale)^T, fp32 accumulation.
// Backends: kGemv (M = 1 only: CUDA cores, a warp per two output columns, one 512-byte piece of
// each row per round in flight while the previous round is used), kGemvSplitK (M = 1: kGemv's
// loop with four columns per warp and K split between two warps), kMma (tensor-core m16n8k32
// e4m3, K split over a block's warps, up to 64 rows per weight pass), kWgmma (any M, 64 rows per
// weight pass: 128 x 128 weight blocks streamed by the tensor copy engine into a ring of
// shared-memory stages, wgmma with the weights as A, a stream-K split of the blocks over one CTA
// per SM, shared tiles summed in CTA order; fp8_gemm_wgmma.cuh), kWgmmaCluster (the same kernel
// in clusters of 2..8 CTAs, one per 128-row tile, summed through distributed shared memory;
// where the tiles fill at most half the SMs: fp8_gemm_wgmma_cluster_serves); kAuto: kGemv at
// M = 1, else kMma (the measured choice per shape is the registry's, registry.h).
enum class Fp8GemmBackend { kAuto, kGemv, kMma, kGemvSplitK, kWgmma, kWgmmaCluster };
// Whether kWgmmaCluster serves an M x N x K GEMM on the current device.
bool fp8_gemm_wgmma_cluster_serves(int64_t m, int64_t n, int64_t k, DType act);
const char* fp8_gemm_kernel_name(Fp8GemmBackend backend);  // the kernel a backend launches
int64_t fp8_gemm_launches(Fp8GemmBackend backend, int64_t m);  // its launches for M rows
// Device resources the backends keep per GPU and stream (the wgmma GEMM's partials), made outside
// any graph capture: the CUDA model calls it on its stream at set-up.
void fp8_gemm_prepare(cudaStream_t stream);
void fp8_gemm_release(cudaStream_t stream);  // frees them (the stream's work done), before it is destroyed
void fp8_block_gemm(void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
                    const float* w_scales, int64_t m, int64_t n, int64_t k, DType act, cudaStream_t stream,
                    Fp8GemmBackend backend = Fp8GemmBackend::kAuto);
// The same product left as the wgmma stream-K split's partials for add_rms_norm (GemmPartials;
// fp8_gemm_wgmma_partials_serves says where): valid until the next such call on the stream.
GemmPartials fp8_block_gemm_partials(const uint8_t* q, const float* a_scales, const uint8_t* w, const float* w_scales,
                                     int64_t m, int64_t n, int64_t k, cudaStream_t stream);

// ---- an FP8 output layer's exact columns (Fp8Quantization::exact_columns, model/linear.h) ----
// Each column's sum of squares of w [n, k] (f32/bf16), in double, on the host (chunks of rows
// summed on the device, the chunks in order here); synchronises the stream.
std::vector<double> column_sum_squares(const void* w, DType dtype, int64_t n, int64_t k, cudaStream_t stream);
// out [n, count] = w[:, columns[i]]; then those columns of w are set to zero (before w is quantised).
void take_columns(void* out, void* w, DType dtype, const int32_t* columns, int64_t count, int64_t n, int64_t k,
                  cudaStream_t stream);
// y [m, n] (row stride ldy) += x [m, k] at columns @ w [n, count]^T, all act, fp32 sums; count a
// multiple of 8, at most 64 (exact_columns_supported).
bool exact_columns_supported(int64_t count);
void exact_columns_add(void* y, int64_t ldy, const void* x, const int32_t* columns, const void* w, int64_t m,
                       int64_t n, int64_t k, int64_t count, DType act, cudaStream_t stream);

// ---- small dense linears ----
// y [m, n] (act or f32) = x [m, k] act @ w [n, k]^T act, for m <= 8, or m <= 16 where the m x k
// activations fit in 200 KB of shared memory, and k % 8 == 0: one block per output row (the GDN
// b/a projections, MoE routers), deterministic.
bool dense_gemv_supports(int64_t m, int64_t n, int64_t k, DType act);
void dense_gemv(void* y, DType out_dtype, const void* x, const void* w, int64_t m, int64_t n, int64_t k, DType act,
                cudaStream_t stream);
// The same per-row kernel over any number of rows (groups of 8 on the grid's y, the weights read
// once per group): every row's result has the same bits whatever M is, which cuBLASLt's choice of
// algorithm per shape does not give (CudaModelOptions::batch_invariant). Slow at large M.
bool dense_gemv_rows_supports(int64_t m, int64_t n, int64_t k);
void dense_gemv_rows(void* y, DType out_dtype, const void* x, const void* w, int64_t m, int64_t n, int64_t k,
                     DType act, cudaStream_t stream);

// Reads `bytes` of device memory once; returns GB/s (read-only bandwidth for the floor).
double measure_read_bandwidth(size_t bytes);
// The device's achievable tensor-core rate in TFLOP/s, the ceiling MFU is taken against: the best
// of a few cuBLASLt GEMMs of size^3 (kF8E4M3: FP8 with the checkpoints' 128x128 weight and 1x128
// activation block scales, bf16 out; kBF16: bf16 in and out, fp32 compute).
double measure_gemm_peak_tflops(DType dtype, int64_t size = 8192);
// A kernel of one CTA per SM that runs about `microseconds` after the previous kernel (it may
// overlap the next one's start, PDL): the stand-in for the op before a GEMM when the GEMM registry
// and `vt bench gemm` time GEMMs as a decode step runs them. `sink`: one float, never written.
void stand_in_kernel(double microseconds, float* sink, cudaStream_t stream);
// Reads `bytes` (16-byte aligned) once with `blocks` x `threads` threads, launched as the model's
// kernels are (after the previous kernel, PDL): a pure read of a GEMM's weight bytes, the floor
// `vt bench gemm` puts beside each GEMM. `sink` (one float) is written only to keep the loads.
void read_bytes(const void* data, size_t bytes, int64_t blocks, int threads, float* sink, cudaStream_t stream);

}  // namespace vt::cuda
