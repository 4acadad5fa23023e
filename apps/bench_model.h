// What `vt bench decode|prefill` and `vt profile decode` share (bench_commands.cpp,
// prefill_bench.cpp): their arguments and the benchmark model they open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "apps/lm_head_options.h"
#ifdef VT_WITH_CUDA
#include "models/qwen3_5/config.h"
#include "runtime/qwen3_5_cuda.h"
#endif

namespace vt::apps {

struct BenchArgs {
  std::string model, synthetic, weights = "fp8", batches = "1", predict, device, trace, gemm_exclude;
  int64_t context = 1024, steps = 64;
  vt::apps::LmHeadArgs lm_head;
  std::string verify, acceptance = "0.5,0.7,0.9";  // bench decode --verify: drafts per verify, acceptance rates
  int tensor_parallel = 1;
  bool json = false, no_graph = false;
  // bench prefill: prompt lengths, tokens per step (forward() chunks), timed runs per row
  std::string prompt_tokens = "1024,4096";
  int64_t step_tokens = 2048, repeats = 3;
  // bench prefill in the server's shape: its sequence slots and context (0: the prompt's), the
  // engine's prompt chunk for the `engine` path, and the top kernels of one profiled run.
  int64_t max_running = 1, max_context = 0, prefill_chunk = 256, kernels = 0, decoding = 0;
  // The engine path: this many prompts of each length at once, packed into steps of --step-tokens.
  int64_t prompts = 1;
  // The engine path: the most consecutive chunks of one prompt a step feeds (vt serve
  // --prompt-chunks-per-step); 0: vt serve's default on a GPU (serving_prompt_chunks_per_step).
  int64_t prompt_chunks_per_step = 0;
  // bench prefill: "flashinfer" (CudaModelOptions::prefill_attention) or "paged".
  std::string prefill_attention = "flashinfer";
  // bench prefill: the paths run per length (chunked, token-by-token, engine), and decode steps
  // timed on the chunked path's sequence after its prompt (a long prompt that then decodes).
  std::string prefill_paths = "chunked,token-by-token,engine";
  int64_t decode_after = 0;
};

// A benchmark's token for position `sequence` (spread over the vocabulary; the values do not
// change the work).
inline int32_t first_token(int64_t sequence, int64_t vocab) { return int32_t((sequence * 7919 + 17) % vocab); }

#ifdef VT_WITH_CUDA
// The options a benchmark model is built with (BF16 activations, room for the batches and steps).
vt::CudaModelOptions bench_model_options(const BenchArgs& args, const std::vector<int64_t>& batches);
vt::Qwen35Config bench_config(const BenchArgs& args);
// A benchmark's model on one GPU, built with `options`: --synthetic (the real shapes, random
// weights) or --model DIR; `name` is what the report calls it.
std::unique_ptr<vt::Qwen35CudaModel> make_bench_model(const BenchArgs& args, const vt::CudaModelOptions& options,
                                                      std::string* name);
// `vt bench prefill` on the GPU (prefill_bench.cpp).
void run_bench_prefill_cuda(const BenchArgs& args);
#endif

}  // namespace vt::apps
