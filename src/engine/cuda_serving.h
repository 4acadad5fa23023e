// vt serve's configuration on a GPU: the engine's step sizes and the CUDA model's options for them.
// One definition, so that a test of the served configuration (tests/cuda/test_cuda_real_width.cpp)
// runs what `vt serve --device cuda` runs.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/engine.h"
#include "model/cuda_forward.h"

namespace vt {

// A GPU step's time grows slowly with its tokens up to ~1K (the weights are read once per step):
// prompt chunks of 256, four of them beside every decoding request, so prompts are fed near the
// prefill rate; a lone prompt's four share one forward (serving_prompt_chunks_per_step), whose
// tokens max_step_tokens holds as it holds the step's.
constexpr int64_t kCudaPrefillChunk = 256;
inline int64_t cuda_step_token_budget(int64_t prefill_chunk, int64_t max_running) {
  return 4 * prefill_chunk + max_running;
}

// The default pool holds one request of the longest context a server is started for (a
// 262,144-token sequence of the 27B: 16 GiB of KV), so that a --max-context alone is served.
inline int64_t cuda_default_cache_tokens(int64_t max_context) { return std::max<int64_t>(65536, max_context); }

// The CUDA model's options for serving with `engine` (its prefill chunk, budget and max_num_draft
// final): one sequence slot per running request; a step holds the engine's token budget (prompt
// chunks plus decode tokens) in one forward, and logits for every row a verify step makes. A
// pool of `cache_tokens` KV tokens that the engine admits into (Model::kv_cache()) when
// `own_pool`; a tensor-parallel model's ranks keep a pool each instead (cache_blocks 0: room for
// every sequence at its longest). Everything else (activations bf16, GEMMs tuned at start-up, the
// fused FP8 quantisation, the side stream, prefill attention, the lm_head as stored) at its
// default: that is the served configuration.
inline CudaModelOptions cuda_serving_options(const EngineOptions& engine, int64_t max_context, int64_t cache_tokens,
                                             bool own_pool) {
  CudaModelOptions options;
  options.max_sequences = engine.max_running;
  options.max_context = max_context;
  options.max_step_tokens = std::max(engine.step_token_budget, engine.max_running);
  options.max_logit_rows = engine.max_running * (1 + engine.max_num_draft);  // verify rows
  options.max_rollback_tokens = engine.max_num_draft > 0 ? engine.max_num_draft + 1 : 0;
  if (own_pool) options.cache_blocks = std::max<int64_t>(1, cache_tokens / options.block_size);
  return options;
}

}  // namespace vt
