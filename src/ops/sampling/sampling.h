// Token sampling: the device kernels (argmax, and temperature / top-k / top-p by Gumbel-max) and
// their CPU twin; the host Sampler is sampler.h, the shared RNG and row parameters device_sampling.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/stream.h"

namespace vt {
struct SampleRowParams;  // ops/sampling/device_sampling.h
}

namespace vt::cpu {

// The device sampling kernel's twin (cuda::sample_rows, ops/device_sampling.h): tokens[i] drawn
// from row params[i].row of logits [rows, vocab] with params[i]; the same token as the kernel's
// but where f32 log/exp round differently on the two sides (a score or a nucleus boundary within
// an ulp).
void sample_rows(int32_t* tokens, const float* logits, int64_t vocab, const SampleRowParams* params, int64_t count);

}  // namespace vt::cpu

namespace vt::cuda {

// out [rows] = argmax over logits [rows, vocab] act (lowest index on ties).
void argmax_rows(int32_t* out, const void* logits, int64_t rows, int64_t vocab, DType act, cudaStream_t stream);

// Sampling on the device (sampling.cu): tokens [count] gets, for each params[i] (device
// [count]), a token drawn from row params[i].row of logits [rows, vocab] act: greedy (argmax,
// lowest index on ties), or temperature, top-k and top-p as the host Sampler::distribution, drawn
// by Gumbel-max with the counter-based RNG of ops/device_sampling.h (cpu::sample_rows is its twin,
// token for token). One block per row; deterministic (fixed-order reductions, integer histograms).
// Rows read the logits once (greedy, or temperature alone) to ten times (top-k and top-p: radix
// selects of three passes each): `bytes` is what the caller expects the launch to read
// (sample_row_bytes), for the profile (0: one pass per row).
void sample_rows(int32_t* tokens, const void* logits, int64_t vocab, DType act, const SampleRowParams* params,
                 int64_t count, cudaStream_t stream, double bytes = 0);

}  // namespace vt::cuda
