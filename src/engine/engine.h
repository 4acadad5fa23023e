// The serving engine: continuous batching on a background thread. Requests are admitted through
// the HybridCache, prefilled in chunks under a per-step token and cost budget, then decoded one
// token per step; each new token reaches the request's callback (streaming). With on-demand
// reservation a request holds KV blocks only for the tokens it has, and when the pool runs dry the
// youngest running request is preempted (recompute: it re-queues and re-feeds its tokens later).
// A request may decode speculatively: drafts of its context (n-gram, or the model's MTP head) are
// verified with its last token in one item of the batched step (all-position logits, a rollback
// window), several tokens
// accepted at once, greedy exactly and sampled by rejection sampling (speculative/speculative.h).
// submit() and cancel() are thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "cache/hybrid_cache.h"
#include "cache/prefix_cache.h"
#include "core/tensor.h"
#include "engine/logprobs.h"
#include "engine/penalties.h"
#include "engine/step_budget.h"
#include "engine/step_record.h"
#include "engine/stop_strings.h"
#include "engine/token_constraint.h"
#include "model/model.h"
#include "ops/sampling/sampler.h"
#include "speculative/load_policy.h"
#include "speculative/speculative.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace vt {

struct RequestParams;

struct EngineOptions {
  int64_t max_running = 64;       // sequences decoding at once (also the cache's state slots)
  // The engine's own pool of KV blocks, for a model without a cache of its own; a model with one
  // (Model::kv_cache(): the CUDA runner's device pool) brings its blocks and block size.
  int64_t cache_blocks = 2048;    // KV blocks in the pool
  int64_t block_size = 16;        // tokens per KV block
  int64_t step_token_budget = 512;  // prompt + decode tokens per step
  // Prompts are fed in chunks of at most this many tokens at offsets fixed by the position alone,
  // so a request's arithmetic (hence its greedy output) does not depend on what else is running
  // (with max_prompt_chunks_per_step 1).
  int64_t prefill_chunk = 256;
  // The most consecutive chunks of one prompt a step feeds (as one forward of their tokens), in a
  // step with no decode, verify or re-fed tokens (beside those, one chunk a prompt, so the gaps
  // between their tokens stay as short): after a prompt's first chunk, its next ones while the
  // step's token and cost budgets hold them, up to the next prefix-cache snapshot point (every
  // prefix_snapshot_stride tokens, cache_point), where the step ends as it would with one chunk. A lone prompt then runs in forwards of about
  // step_token_budget tokens. Chunk boundaries stay those of the position, but how many share a
  // forward depends on what else runs: 1 keeps a request's shapes independent of the load (batch
  // invariance).
  int64_t max_prompt_chunks_per_step = 1;
  // The step's cost (engine/step_budget.h): a token at context position p costs 1 + p / C units,
  // C being where its attention costs as much as the rest of its forward. A step holds what
  // step_token_budget tokens cost at context C, a prompt chunk what prefill_chunk tokens do: below
  // context C only the token budget binds; past it a prompt's chunks shrink (to min_prefill_chunk
  // at the least), so a step deep in a long prompt, and every decoding request in it, takes about
  // as long as one at its start. A step's first prompt chunk is held to the token budget alone, so
  // a prompt advances however much the decoding requests cost.
  int64_t step_cost_context = -1;  // C; -1: from the model's shape (ModelInfo), 0: tokens alone
  int64_t min_prefill_chunk = 16;  // also the granule a shrunk chunk is rounded up to
  // kFull: blocks for prompt + max_tokens at admission, so a running request never waits for
  // memory (nor is preempted). kOnDemand: blocks for the tokens a request has, one more block when
  // it grows into it; preemption by recompute when none is free.
  enum class Reservation { kFull, kOnDemand };
  Reservation reservation = Reservation::kOnDemand;
  // kOnDemand: a request is admitted only if this many blocks stay free after it (room for the
  // running requests to grow); ignored when nothing runs, so a request that fits always starts.
  int64_t admission_watermark_blocks = 0;  // < 0: 1% of the pool
  // Speculative decoding: the most drafts a request may have verified per step
  // (RequestParams::num_draft); 0: none. > 0 needs a model that supports rollback, and a step
  // budget of at least 1 + max_num_draft tokens (a verify step is never split).
  int64_t max_num_draft = 0;
  // Makes a speculating request's drafter at submit (it proposes on the engine thread, outside the
  // lock; freed with the request); null: prompt lookup (NgramDrafter). A drafter that reads the
  // target's hidden states (an MtpDrafter over MtpHiddenSource::kSequence) has the request's
  // forwards keep those it has yet to read, and reads them before every step (propose, or
  // catch_up while the prompt is fed), so a target sequence holds at most one step's. It is kept
  // through a preemption: its own cache (the MTP head's sequence) stays valid, and the re-fed
  // tokens it has read keep nothing. For seeded outputs to be reproducible its drafts should
  // depend only on the request (a sampling drafter: seed it from the request's seed).
  std::function<std::unique_ptr<Drafter>(const RequestParams&)> make_drafter;
  // Speculation by load (speculative/load_policy.h): each step, the speculating requests draft only
  // as far as the measured step costs say it makes more tokens per second; the others verify their
  // last token alone that step. Greedy output is unchanged, and sampled output keeps its
  // distribution; a seeded sampled request (RequestParams::seeded) speculates as asked.
  bool speculation_by_load = false;
  // Sample on the model's device when it can (Model::supports_device_sampling): only the token ids
  // come back from a step, not [rows, vocab] logits. Requests that need the logits on the host
  // (logprobs, logit_bias, speculative decoding) keep the host Sampler and get their rows. Greedy
  // outputs are the same either way; a seeded sampled request is reproducible on the device (its
  // seed and token index fix each draw, whatever else runs) but draws other tokens than the host
  // Sampler's generator would.
  bool device_sampling = true;
  // A file that gets one JSON line per step (StepRecord: wall, forward and host time, tokens by
  // kind); empty: none.
  std::string step_trace;
  // Prefix caching (cache/prefix_cache.h): a request starts from the longest saved state its
  // prompt extends (the end of an earlier prompt or completion, or every
  // prefix_snapshot_stride prompt tokens), sharing that prefix's KV blocks (the full ones; the last,
  // partly filled one is copied); needs a model that saves states (Model::supports_prefix_cache).
  // Saved states hold their blocks in the pool: when admission or growth finds too few free, the
  // least recently used states that alone hold blocks are evicted before anyone waits or is
  // preempted.
  bool prefix_cache = false;
  int64_t prefix_snapshot_stride = 2048;     // a multiple of prefill_chunk
  // Saved states kept (least recently used go first): their snapshots' bytes plus the bytes of the
  // KV blocks no running request shares (Model::kv_block_bytes()).
  int64_t prefix_cache_bytes = int64_t(4) << 30;
};

// vt serve's max_prompt_chunks_per_step when not given: the chunks the step's token budget holds,
// so a lone prompt fills its step; 1 under batch invariance (a request's shapes must not depend on
// the load).
inline int64_t serving_prompt_chunks_per_step(const EngineOptions& options, bool batch_invariant) {
  if (batch_invariant || options.prefill_chunk < 1) return 1;
  return std::max<int64_t>(1, options.step_token_budget / options.prefill_chunk);
}

struct RequestParams {
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // end the request; the token's text is not emitted
  std::vector<std::string> stop_strings;  // end the request; the text stops before the match
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits before logprobs and sampling
  // Presence, frequency and repetition penalties (engine/penalties.h), after logit_bias and before
  // logprobs and sampling; a penalised request samples on the host.
  Penalties penalties;
  // -1: none. Else each token event carries the chosen token's logprob and this many (<= 20) top
  // alternatives: the log-softmax of the model's logits plus logit_bias and the penalties (before
  // temperature, top-k and top-p).
  int64_t logprobs = -1;
  // Speculative decoding: 0 decodes one token per step; k in [1, EngineOptions::max_num_draft]
  // verifies up to k n-gram (prompt-lookup) drafts per step. With adaptive_draft, k moves in
  // [1, num_draft] with the acceptance (adapt_num_draft). The output is the same as without
  // (greedy: exactly; sampled: the same distribution, another draw). A seeded request's output
  // does not depend on what else runs: a verify step waits for room rather than shrinking.
  int64_t num_draft = 0;
  bool adaptive_draft = false;
  // A sampled request whose output must repeat (the client gave a seed): speculation by load
  // leaves its drafts as asked, since turning them off would change its draws.
  bool seeded = false;
  // Prefix caching: a prompt position (0: none) to save a state at besides the prompt's end. A
  // chat server gives where the generation prompt starts: the next turn renders this turn's reply
  // without it (a Qwen template drops the opened <think>), so that turn's prompt extends the
  // tokens up to here and not the whole of this prompt.
  int64_t cache_point = 0;
  // Structured output: makes the request's token rule at submit (one per sequence); null: none.
  // A constrained request samples on the host (its rows' logits come back from the device).
  std::function<std::unique_ptr<TokenConstraint>()> make_constraint;
};

constexpr int64_t kMaxTopLogprobs = 20;

enum class FinishReason { kNone, kStop, kLength, kCancelled };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled"

// One callback per generated token, the last with finished = true (or a final event with no token
// when cancelled). The final event comes after the request's cache entries are freed.
struct TokenEvent {
  int32_t token_id = -1;  // -1 on a final event that carries no token
  std::string text;       // new text to show (may be empty mid-character or while a stop string may start)
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  int64_t prompt_tokens = 0, completion_tokens = 0;  // counts so far
  int64_t cached_tokens = 0;  // prompt tokens taken from the prefix cache (not computed)
  std::string error;  // set when the engine failed the request (finished = true)
  // With an error: the request never ran (the engine had failed, Engine::failed()); another
  // server may take it as it is.
  bool retryable = false;
  // With RequestParams::logprobs >= 0 and a token: its logprob and the top alternatives.
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;
};
using TokenCallback = std::function<void(const TokenEvent&)>;

struct EngineStats {
  int64_t running = 0, waiting = 0;
  CacheUsage cache;
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0, requests_finished = 0, requests_cancelled = 0;
  int64_t steps = 0;
  bool failed = false;            // Engine::failed()
  int64_t preemptions = 0;        // running requests sent back to the queue for want of KV blocks
  int64_t recomputed_tokens = 0;  // tokens fed again after a preemption
  // Decode steps of speculating requests, summed over the requests (num_draft: the engine's
  // max_num_draft; empty histograms when speculation is off).
  SpeculativeStats speculative;
  StepStats step;  // every step's wall time (a histogram), its forwards' share, its tokens by kind
  // Prefix cache, in tokens as vLLM counts them: prompt tokens looked up at admission, and those
  // found (not computed); saved states, their memory and the LRU evictions.
  // The saved states hold the KV blocks of their tokens by reference: `blocks` are those only the
  // cache keeps (no running request shares them), `bytes` what its budget counts (the snapshots'
  // bytes and those blocks'; cache/prefix_cache.h).
  struct Prefix {
    int64_t queries = 0, hits = 0;
    int64_t snapshots = 0, snapshot_bytes = 0, blocks = 0, bytes = 0, evictions = 0;
  } prefix;
};

class Engine {
 public:
  // tokenizer may be null: no text in events and no stop strings allowed.
  Engine(Model& model, const Tokenizer* tokenizer, const EngineOptions& options);
  ~Engine();  // stops the thread; unfinished requests get a cancelled event
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request and returns its id. Throws vt::Error (nothing queued) when the request can
  // never run: bad ids, prompt + max_tokens beyond the model's positions or the whole cache.
  // The callback runs on the engine thread; it must be quick and must not call submit().
  int64_t submit(std::vector<int32_t> prompt, const RequestParams& params, TokenCallback callback);
  // Ends a request: its cache entries are freed before the next step. Unknown or finished ids
  // are ignored. The callback gets a final kCancelled event.
  void cancel(int64_t request_id);

  // A forward of the model threw (a device error): that step's requests and every running one
  // ended with the error, queued ones end retryable, and submit() refuses from then on. The state
  // of the model's device is unknown, so nothing runs on it again; the process should be
  // restarted. failure() says what happened ("" while healthy).
  bool failed() const;
  std::string failure() const;

  // The largest prompt + max_tokens that can ever be admitted.
  int64_t max_request_tokens() const;
  int64_t max_num_draft() const { return options_.max_num_draft; }
  EngineStats stats() const;
  const Model& model() const { return model_; }

 private:
  struct Sequence;
  void loop();
  void admit_waiting();             // with mutex_ held
  void drop_cancelled(std::vector<TokenEvent>& events, std::vector<TokenCallback>& callbacks);
  void schedule(std::vector<Sequence*>& scheduled);  // with mutex_ held; may preempt
  // The tokens of a prompt's chunk that starts at `from`: to StepBudget::chunk_end, the prompt's
  // end or the request's cache point (with the prefix cache), whichever comes first.
  int64_t prompt_chunk(const Sequence& sequence, int64_t from) const;
  // Whether the prefix cache saves the sequence's state once `fed` tokens are fed: the prompt's
  // end, its cache point, every prefix_snapshot_stride prompt tokens. A step ends at such points.
  bool snapshot_point(const Sequence& sequence, int64_t fed) const;
  void preempt_youngest();                           // with mutex_ held
  // Drafts of every running sequence whose next step verifies (engine thread, no lock held).
  void draft_running();
  // Speculation by load: which speculating sequences draft this step (Sequence::declined_by_load).
  void choose_speculation_by_load();
  // Schedules a speculating sequence's verify within `budget` tokens and its KV blocks
  // (preempting as a decode does); false when it does not fit this step.
  bool schedule_verify(Sequence& sequence, int64_t budget, bool* preempted_self);
  void run_step(std::vector<Sequence*>& scheduled);
  void advance(Sequence& sequence, float* logits);  // biases, samples and emits one token
  // What the device gives for a sequence's row this round (Model::forward_batch_sample): its
  // token when it samples there, its logits when the host must see them, else nothing.
  RowOutput row_output(const Sequence& sequence, int64_t tokens) const;
  // Decides a verify step's tokens from its rows [drafts + 1, vocab], emits them, rolls back;
  // returns the drafts accepted.
  int64_t advance_verified(Sequence& sequence, float* logits);
  // logit_bias, then the penalties after the completion so far and `drafted` (a verify row's drafts before it).
  void bias(const Sequence& sequence, float* logits, std::span<const int32_t> drafted = {}) const;
  // Ends a sequence with an error (its final event says why); it leaves at the end of the step.
  void fail(Sequence& sequence, const std::string& error);
  void fail_engine(const std::string& error);  // sets failure_ (the first error stays)
  // Once failed, with mutex_ held: every running sequence fails, and every queued one with a
  // retryable final event (in `events`, delivered by the caller outside the lock).
  void fail_remaining(std::vector<TokenEvent>& events, std::vector<TokenCallback>& callbacks);
  // Prefix caching (engine_prefix.cpp): a newly admitted sequence starts from the longest saved
  // state its tokens extend (found before admission, whose table it heads with the saved full
  // blocks); a sequence's state is saved at the end of its prompt, every prefix_snapshot_stride
  // prompt tokens and at the end of its completion (engine thread).
  PrefixCache::Hit find_prefix(const Sequence& sequence);  // with mutex_ held
  void restore_prefix(Sequence& sequence, const PrefixCache::Hit& hit);  // with mutex_ held
  void save_prefix(Sequence& sequence);
  // Grows a sequence's blocks to `tokens` tokens, taking back blocks only the prefix cache holds
  // when too few are free; false when still short (the caller preempts).
  bool reserve(Sequence& sequence, int64_t tokens);
  // Whether `blocks` blocks are free, after evicting prefix entries for them if need be.
  bool make_room(int64_t blocks);
  void update_prefix_stats();  // with mutex_ held
  // Emits `id`, chosen from `logits` (biased): logprobs, stop checks, the event. True when it
  // ended the sequence.
  bool emit(Sequence& sequence, int32_t id, const float* logits);

  Model& model_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;
  int64_t vocab_size_;
  std::unique_ptr<HybridCache> own_cache_;  // null when the model has a cache of its own
  HybridCache& cache_;  // the model's (Model::kv_cache()) or own_cache_: admission, growth, release
  std::unique_ptr<PrefixCache> prefix_;  // null: prefix caching off
  std::unique_ptr<SpeculationLoadPolicy> load_policy_;  // null: speculation as each request asks
  Buffer logits_;  // F32 [rows, vocab]: a batched forward's rows (grows for verify steps)
  bool device_sampling_ = false;  // options_.device_sampling and the model supports it
  int64_t watermark_blocks_ = 0;
  StepBudget step_budget_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string failure_;  // why the engine failed; empty while healthy
  int64_t next_id_ = 1;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  std::unordered_set<int64_t> cancelled_;
  EngineStats totals_;
  std::unique_ptr<StepTrace> step_trace_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::thread thread_;
};

}  // namespace vt
