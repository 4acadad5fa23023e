// Tolerances, written once (docs/numerics.md explains each) and used by every test.
#pragma once

namespace vt::numerics {

// CPU fp32 reference vs HF transformers fp32 on the same (BF16-stored) weights: relative L2
// error of the logits over all prompt positions.
constexpr double kLogitsRelL2 = 1e-4;
// FP8 weight-only (dequantised weights, fp32 activations) vs HF on the dequantised weights.
constexpr double kFp8WeightOnlyRelL2 = 1e-4;
// FP8 W8A8 vs the W8A8 reference. Activation quantisation is discontinuous: a 1-ulp difference
// before a rounding boundary flips an e4m3 code (a 6% step), so two correct fp32 implementations
// differ far more than in the unquantised case. The golden script measures the same W8A8 math in
// float32 vs float64 (reference.json: w8a8_noise_floor); the bound sits above that floor.
constexpr double kFp8W8A8RelL2 = 5e-2;
// The same with every GEMM forced on a wgmma kernel: each 128-K block is summed in the tensor
// core's ~14-bit accumulator (kFp8GemmWgmmaRelL2 per GEMM, ~2.3e-4), so ~2 x 2.3e-4 / 2^-3 = 0.4%
// of the next layer's e4m3 codes flip (each a 12.5% step): ~1% of error injected per re-quantised
// GEMM input, compounding over the layers. Measured on the H200 (both splits alike): 0.146 on the
// 7-token prompt, 0.084 on the 150-token one (the fp32-summing kernels: 0.006 / 0.015). A broken
// GEMM gives ~1.
constexpr double kFp8W8A8WgmmaRelL2 = 2e-1;
// A real model (SmolLM2-135M from GGUF, dequantised to f32) vs HF fp32 on the same weights:
// absolute difference of single logits (measured 4e-5 at logits of magnitude ~20), and relative
// difference of a perplexity (the bound; measured 3e-8).
constexpr double kRealModelLogitAbs = 2e-3;
constexpr double kPerplexityRelative = 5e-3;
// The trained small model (tests/golden/qwen3_5_trained) vs HF fp32 on the same bf16 weights:
// relative difference of the held-out perplexity. |d log ppl| <= mean |d NLL| <= 2 max |d logit|,
// and fp32 summation-order differences move the logits by ~1e-6 each; measured 1.3e-9
// (docs/perf/2026-12-05-trained-small-model.md). A 2% change of one weight matrix gives 3e-4.
constexpr double kTrainedPerplexityRelative = 1e-5;
// The same perplexity from the CUDA model with bf16 activations (the served configuration): each
// op's output rounded to bf16 (2^-9) moves a logit of ~10 by ~0.05 (kCudaBf16ActivationsRelL2's
// measured 1e-2 .. 5e-2), and d log ppl is the mean of signed NLL changes, so well under 0.02.
constexpr double kTrainedBf16PerplexityRelative = 2e-2;
// The same computation along two algorithmic paths in fp32 (chunked vs token-by-token gated
// delta rule; prefill then decode vs one prefill).
constexpr double kSamePathRelL2 = 1e-5;
// The CUDA chunked delta rule (gdn_chunked, 64-token chunks) vs the CPU reference, token by token
// or chunked, f32: outputs after the gated norm and final states (the same bound: two
// algorithmic paths in fp32; a CPU emulation of the kernels' exact order measured 3e-7 .. 7e-7).
constexpr double kCudaChunkedDeltaRuleRelL2 = kSamePathRelL2;
// Its bf16 output vs gdn_recurrent's: with bf16 activations the chunked products are one TF32
// product (2^-11 per operand), so the fp32 values differ by ~4e-4 relative before both are
// rounded to bf16 (one bf16 ulp, 2^-8 relative, would be 3.9e-3 were every element on a rounding
// boundary; half an ulp on average plus the 4e-4 gives ~1.5e-3).
constexpr double kCudaChunkedBf16OutputRelL2 = 4e-3;
// One attention step (prepare + split-key partials + combine) on the GPU vs the CPU reference:
// f32 activations and caches, any of the kernels (grouped on the CUDA cores, per query head);
// bf16, where the inputs, the caches and the output are rounded to bf16 as the CUDA path stores
// them (the CPU computing in f32 from the same rounded values): the output's own rounding is
// ~2^-9 / sqrt(3) = 1.1e-3 relative; the tensor-core kernel's bf16 hi + lo parts of q and P add
// ~2^-17. Measured on the H200 (2026-12-02): f32 1.9e-7 .. 2.4e-7, bf16 1.64e-3 .. 1.66e-3 with
// either the tensor-core or the CUDA-core kernel.
constexpr double kCudaAttentionF32RelL2 = kSamePathRelL2;
constexpr double kCudaAttentionBf16RelL2 = 1e-2;
// Prefill attention (FlashInfer's sm90 kernel, then the gate) vs the same CPU reference, bf16: q
// and the softmax weights P enter the tensor cores as bf16 (2^-9 each, ~1e-3 of the output
// between them on top of the output's own bf16 rounding, and the kernel's output is rounded to
// bf16 once more before the gate), so the same bound as the flash-decoding kernels.
constexpr double kCudaPrefillAttentionBf16RelL2 = kCudaAttentionBf16RelL2;
// One FP8 block GEMM on the GPU vs the CPU's (dequantised operands, fp32 sums): vt's CUDA-core and
// mma.sync kernels sum in fp32 (kFp8GemmFp32RelL2); the wgmma kernel sums each 128-K block of e4m3
// products in the tensor core's accumulator, which keeps about 14 bits (DeepSeek-V3 report,
// section 3.3.2), before its fp32 scale-and-add: 1.9-2.6e-4 measured on the H200 at every shape
// (kFp8GemmWgmmaRelL2); cuBLASLt's block-scaled path the same way, in its own K order.
constexpr double kFp8GemmFp32RelL2 = 1e-5;
constexpr double kFp8GemmWgmmaRelL2 = 5e-4;
constexpr double kFp8GemmCublasLtRelL2 = 1e-3;
// The MoE expert GEMV and combine kernels (ops/moe/moe.cu) vs their CPU references with bf16
// outputs: the kernel sums in fp32 (as the reference) and rounds each output once to bf16, at most
// 2^-9 relative per element, so the relative L2 is below 2^-9 = 1.95e-3; twice that leaves room
// for the fp32 sum-order differences (kFp8GemmFp32RelL2 / kSamePathRelL2, ~1e-6).
constexpr double kCudaMoeBf16OutputRelL2 = 4e-3;

// CUDA forward with BF16 activations (and KV cache) vs HF fp32 on the same weights: every
// activation is rounded to bf16 (2^-9 relative) before each GEMM and between kernels.
constexpr double kCudaBf16ActivationsRelL2 = 8e-2;
// The same for MoE models: bf16 rounding upstream of the router flips near-tied experts (the
// golden MoE cases have router top-k gaps down to 1.5e-3), a discontinuity like W8A8's. The f32
// CUDA path checks MoE tightly (kLogitsRelL2); this bound only catches gross breakage.
constexpr double kCudaBf16MoeActivationsRelL2 = 3e-1;

// Real-width FP8 goldens (tests/golden/real_width/<case>, made on the GPU by
// scripts/golden/make_real_width_goldens.py) in vt serve's configuration (bf16 activations, the GEMM
// mix tuned at start-up, CUDA graphs) vs HF's float32 W8A8. The bound is kRealWidthFloorFactor x the
// floor recorded with the reference: HF's own W8A8 in the served arithmetic (bf16 activations,
// float32 sums in the quantised GEMMs) vs float32, the largest over the case's prompts. vt's run is
// another draw of the same rounding, so it lands near that floor; 2x leaves room for the draw and
// for the tuned kernels' 14-bit wgmma block sums (2.3e-4 per GEMM, well under bf16's 2^-9 per
// element). A floor whose bound passes kRealWidthMeaningfulRelL2 could not tell a broken GEMM
// (rel L2 ~1) from noise: the test fails then rather than pass vacuously. docs/numerics.md.
constexpr double kRealWidthFloorFactor = 2.0;
constexpr double kRealWidthMeaningfulRelL2 = 0.5;

// Device sampling (cuda::sample_rows) vs its CPU twin (cpu::sample_rows) on the same logits, seeds
// and counters: the fraction of draws allowed to differ. The two take the same steps in f32 and
// integers; only logf / log1pf / expf may round differently (CUDA's are within 1-2 ulp, glibc's
// about 0.5), which changes a draw only when two Gumbel scores or a nucleus boundary lie within an
// ulp (expected ~1e-6 per draw).
constexpr double kDeviceSamplingTwinMismatch = 1e-3;

}  // namespace vt::numerics
