// The engine loop: cancel, admit, schedule under the token and cost budgets (growing KV
// reservations and preempting the youngest request when blocks run out; drafting for speculating
// requests), forward each scheduled sequence, sample (on the model's device when it can) or
// verify, stream, free.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "engine/engine_sequence.h"
#include "speculative/ngram_drafter.h"

namespace vt {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kNone: break;
  }
  return "none";
}

Engine::Engine(Model& model, const Tokenizer* tokenizer, const EngineOptions& options)
    : model_(model), tokenizer_(tokenizer), options_(options), vocab_size_(model.info().vocab_size),
      own_cache_(model.kv_cache() ? nullptr
                                  : std::make_unique<HybridCache>(options.cache_blocks, options.block_size,
                                                                  options.max_running)),
      cache_(own_cache_ ? *own_cache_ : *model.kv_cache()),
      logits_(DType::kF32, {std::max<int64_t>(1, options.max_running), model.info().vocab_size}) {
  VT_CHECK(options.max_running >= 1, "engine: max_running must be >= 1");
  VT_CHECK(options.prefill_chunk >= 1, "engine: prefill_chunk must be >= 1");
  VT_CHECK(options.step_token_budget >= options.prefill_chunk, "engine: the step token budget (",
           options.step_token_budget, ") must hold one prefill chunk (", options.prefill_chunk, ")");
  VT_CHECK(options.max_num_draft >= 0, "engine: max_num_draft must be >= 0, got ", options.max_num_draft);
  VT_CHECK(options.max_num_draft == 0 || model.supports_rollback(), "engine: speculative decoding needs a model that "
           "can roll back a sequence; ", model.info().architecture, " on this backend cannot");
  VT_CHECK(options.step_token_budget >= 1 + options.max_num_draft, "engine: the step token budget (",
           options.step_token_budget, ") must hold a verify step of 1 + ", options.max_num_draft, " drafts");
  VT_CHECK(options.step_cost_context >= -1 && options.min_prefill_chunk >= 1, "engine: step_cost_context (",
           options.step_cost_context, ") must be >= -1 and min_prefill_chunk (", options.min_prefill_chunk, ") >= 1");
  VT_CHECK(options.max_prompt_chunks_per_step >= 1, "engine: max_prompt_chunks_per_step must be >= 1, got ",
           options.max_prompt_chunks_per_step);
  step_budget_ = StepBudget(
      options.step_cost_context >= 0 ? options.step_cost_context : attention_cost_context(model.info()),
      options.step_token_budget, options.prefill_chunk, options.min_prefill_chunk);
  totals_.speculative.reset(options.max_num_draft);
  device_sampling_ = options.device_sampling && model.supports_device_sampling();
  if (options.prefix_cache) {
    VT_CHECK(model.supports_prefix_cache(), "engine: prefix caching needs a model that saves its sequences' states; ",
             model.info().architecture, " on this backend does not");
    VT_CHECK(options.prefix_snapshot_stride >= 1 && options.prefix_snapshot_stride % options.prefill_chunk == 0,
             "engine: prefix_snapshot_stride (", options.prefix_snapshot_stride, ") must be a multiple of prefill_chunk (",
             options.prefill_chunk, ")");
    prefix_ = std::make_unique<PrefixCache>(options.prefix_cache_bytes, cache_, model.kv_block_bytes());
  }
  watermark_blocks_ = options.admission_watermark_blocks >= 0 ? options.admission_watermark_blocks
                                                              : cache_.num_blocks() / 100;
  if (!options.step_trace.empty()) step_trace_ = std::make_unique<StepTrace>(options.step_trace);
  if (options.speculation_by_load && options.max_num_draft > 0)
    load_policy_ = std::make_unique<SpeculationLoadPolicy>(options.step_token_budget);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  // The model's cache outlives the engine: its entries go back for the next user.
  for (auto& sequence : running_) cache_.release(sequence->id);
  for (auto& sequence : running_) sequence->callback(sequence->ending(FinishReason::kCancelled));
  for (auto& sequence : waiting_) sequence->callback(sequence->ending(FinishReason::kCancelled));
}

int64_t Engine::max_request_tokens() const {
  return std::min(model_.info().max_positions, cache_.num_blocks() * cache_.block_size());
}

int64_t Engine::submit(std::vector<int32_t> prompt, const RequestParams& params, TokenCallback callback) {
  VT_CHECK(!prompt.empty(), "the prompt is empty");
  for (int32_t id : prompt)
    VT_CHECK(id >= 0 && id < vocab_size_, "prompt token id ", id, " is outside the vocabulary [0, ", vocab_size_, ")");
  VT_CHECK(params.max_tokens >= 1, "max_tokens must be >= 1");
  const int64_t total = int64_t(prompt.size()) + params.max_tokens;
  VT_CHECK(total <= max_request_tokens(), "the prompt (", prompt.size(), " tokens) plus max_tokens (", params.max_tokens,
           ") is ", total, " tokens, more than the ", max_request_tokens(), " this server can ever hold");
  VT_CHECK(tokenizer_ || params.stop_strings.empty(), "stop strings need a tokenizer");
  VT_CHECK(callback, "submit: a callback is required");
  VT_CHECK(params.logprobs >= -1 && params.logprobs <= kMaxTopLogprobs, "logprobs ", params.logprobs,
           " must be in [-1, ", kMaxTopLogprobs, "]");
  VT_CHECK(params.num_draft == 0 || options_.max_num_draft > 0, "speculative decoding (num_draft ", params.num_draft,
           ") is not enabled on this engine");
  VT_CHECK(params.num_draft >= 0 && params.num_draft <= options_.max_num_draft, "num_draft ", params.num_draft,
           " must be in [0, ", options_.max_num_draft, "]");
  for (const auto& [id, bias] : params.logit_bias)
    VT_CHECK(id >= 0 && id < vocab_size_ && std::isfinite(bias), "logit_bias: token ", id, " (bias ", bias,
             ") must lie in [0, ", vocab_size_, ") with a finite bias");
  auto sequence = std::make_unique<Sequence>(params, tokenizer_);  // validates sampling params
  sequence->prompt_size = int64_t(prompt.size());
  sequence->penalty_state = PenaltyState(params.penalties, prompt);  // validates the penalties
  sequence->tokens = std::move(prompt);
  sequence->tokens.reserve(size_t(total));
  sequence->callback = std::move(callback);
  if (params.make_constraint) sequence->constraint = params.make_constraint();
  if (params.num_draft > 0) {
    sequence->drafter = options_.make_drafter ? options_.make_drafter(params) : std::make_unique<NgramDrafter>();
    VT_CHECK(sequence->drafter, "engine: make_drafter made no drafter");
    sequence->keep_hidden = sequence->drafter->reads_target_sequence();
    sequence->num_draft = params.num_draft;
  }
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    VT_CHECK(!stopping_, "the engine is shutting down");
    VT_CHECK(failure_.empty(), "the engine failed and takes no new requests: ", failure_);
    id = sequence->id = next_id_++;
    waiting_.push_back(std::move(sequence));
  }
  wake_.notify_all();
  return id;
}

void Engine::cancel(int64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_.insert(request_id);
  }
  wake_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineStats stats = totals_;
  stats.running = int64_t(running_.size());
  stats.waiting = int64_t(waiting_.size());
  stats.cache = cache_.usage();
  stats.failed = !failure_.empty();
  return stats;
}

bool Engine::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !failure_.empty();
}

std::string Engine::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

// First come, first served: the head of the queue waits until it fits, and nothing passes it.
// Preempted requests wait at the head, so they come back before anything newer. Blocks that only
// the prefix cache holds are taken back (its least recently used entries) before anyone waits.
void Engine::admit_waiting() {
  while (!waiting_.empty() && int64_t(running_.size()) < options_.max_running) {
    Sequence& head = *waiting_.front();
    const int64_t context = int64_t(head.tokens.size());  // the prompt, plus what a preempted one generated
    const bool full = options_.reservation == EngineOptions::Reservation::kFull;
    // A saved prefix's full blocks head the sequence's table: only the rest is taken from the pool.
    const PrefixCache::Hit hit = find_prefix(head);
    const std::span<const int32_t> shared(hit.blocks.data(), size_t(hit.length / cache_.block_size()));
    const int64_t watermark = full || running_.empty() ? 0 : watermark_blocks_;
    const int64_t needed =
        cache_.blocks_for(full ? head.prompt_size + head.params.max_tokens : context) - int64_t(shared.size());
    // The hit's blocks stay while entries are evicted for room (its own entry may be among them).
    cache_.retain_blocks(hit.blocks);
    const bool admitted = make_room(needed + watermark) &&
                          (full ? cache_.admit(head.id, head.prompt_size, head.params.max_tokens, shared)
                                : cache_.admit(head.id, context, 0, shared));
    if (admitted) {
      try {
        head.state = model_.new_sequence_in_cache(head.id, head.prompt_size + head.params.max_tokens);
        head.fed = 0;
        if (prefix_ && !head.keep_hidden && head.preemptions == 0) totals_.prefix.queries += head.prompt_size;
        if (hit.snapshot) restore_prefix(head, hit);
      } catch (const std::exception& error) {
        // A request the model cannot start (no memory for its sequence, a saved state it cannot
        // restore) fails alone, after this step with the finished ones; the others go on.
        std::fprintf(stderr, "vt engine: request %lld not started: %s\n", (long long)head.id, error.what());
        head.state.reset();
        head.fed = 0;
        fail(head, str("the request could not start: ", error.what()));
      }
    }
    cache_.release_blocks(hit.blocks);
    if (!admitted) break;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

// The youngest running request gives back its blocks and slot and waits at the head of the
// queue; its tokens and sampler stay, so it resumes where it stopped.
void Engine::preempt_youngest() {
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  cache_.release(victim->id);
  victim->state.reset();
  victim->fed = 0;
  victim->step_tokens = 0;
  victim->verifying = false;
  ++victim->preemptions;
  ++totals_.preemptions;
  waiting_.push_front(std::move(victim));
}

// Decode tokens first (one each, or a speculating request's verify: its last token and drafts, in
// admission order; each reserves the blocks it writes into, preempting the youngest when none is
// free), then tokens a resumed request re-feeds, then prompt chunks while the budget lasts: each
// prompt's next chunk, then, in a step without decoding requests, the chunks after it, up to
// max_prompt_chunks_per_step a prompt (one forward; its blocks are held since admission). Every
// token is charged its cost (step_budget.h): decode and verify tokens are held to the token budget
// alone, so they always run; re-fed tokens and every prompt chunk after the step's first also to
// the cost left.
void Engine::schedule(std::vector<Sequence*>& scheduled) {
  int64_t budget = options_.step_token_budget;
  double cost_left = step_budget_.step_limit();
  for (auto& sequence : running_) sequence->step_tokens = 0, sequence->verifying = false;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& sequence = *running_[i];
    if (sequence.finished || !sequence.decoding() || budget < 1) continue;
    bool preempted_self = false;
    if (sequence.verifies_next()) {
      if (schedule_verify(sequence, budget, &preempted_self)) {
        budget -= sequence.step_tokens;
        cost_left -= step_budget_.cost(sequence.fed, sequence.fed + sequence.step_tokens);
      }
      if (preempted_self) break;
      continue;
    }
    while (!reserve(sequence, sequence.fed + 1)) {
      preempted_self = running_.back().get() == &sequence;
      preempt_youngest();  // never the last one standing: submit() checked a request fits alone
      if (preempted_self) break;
    }
    if (preempted_self) break;  // everything after it is gone too
    sequence.step_tokens = 1;
    budget -= 1;
    cost_left -= step_budget_.cost(sequence.fed, sequence.fed + 1);
  }
  for (auto& sequence : running_) {
    if (sequence->finished || !sequence->decoding() || sequence->verifying) continue;
    // A speculating request leaves its last token to a verify step, as before the preemption.
    const int64_t unfed = int64_t(sequence->tokens.size()) - (sequence->drafter ? 1 : 0);
    const int64_t refeed = unfed - sequence->fed - sequence->step_tokens;
    const int64_t begin = sequence->fed + sequence->step_tokens;
    const int64_t extra = step_budget_.tokens_within(begin, cost_left, std::min(refeed, budget));
    if (extra <= 0) continue;
    sequence->step_tokens += extra;  // blocks held since admission
    budget -= extra;
    cost_left -= step_budget_.cost(begin, begin + extra);
  }
  for (auto& sequence : running_)
    if (sequence->step_tokens > 0) scheduled.push_back(sequence.get());
  // A prompt takes more than one chunk only in a step no token waits on: beside decoding requests
  // each extra chunk would lengthen the gap between their tokens (the fairness bound).
  const bool prompts_alone = scheduled.empty();
  bool chunked = false;
  for (auto& sequence : running_) {
    if (sequence->finished || sequence->decoding()) continue;  // finished: one that could not start
    const int64_t chunk = prompt_chunk(*sequence, sequence->fed);
    const double cost = step_budget_.cost(sequence->fed, sequence->fed + chunk);
    if (!scheduled.empty() && (chunk > budget || (chunked && cost > cost_left))) break;
    chunked = true;
    sequence->step_tokens = chunk;
    budget -= chunk;
    cost_left -= cost;
    scheduled.push_back(sequence.get());
  }
  if (!prompts_alone) return;
  // Then each prompt's next chunks, once every prompt has its next one (a prompt that arrives
  // while another is mid-way is fed the next step, not after the other's extra chunks), held to
  // the budgets as a second prompt's chunk is. The step ends where a snapshot is saved (the state
  // after the forward is the one saved). A drafter's kept hidden states stay within the step's
  // tokens, hence the step token budget (draft_running).
  for (Sequence* sequence : scheduled) {
    for (int64_t chunks = 1; chunks < options_.max_prompt_chunks_per_step; ++chunks) {
      const int64_t begin = sequence->fed + sequence->step_tokens;
      if (begin == sequence->prompt_size || snapshot_point(*sequence, begin)) break;
      const int64_t next = prompt_chunk(*sequence, begin);
      const double next_cost = step_budget_.cost(begin, begin + next);
      if (next > budget || next_cost > cost_left) break;
      sequence->step_tokens += next;
      budget -= next;
      cost_left -= next_cost;
    }
  }
}

// Chunk ends depend on the position alone (a prompt restored from the prefix cache mid-chunk
// first completes its chunk), so the chunks are those of a prompt fed from token 0.
int64_t Engine::prompt_chunk(const Sequence& sequence, int64_t from) const {
  int64_t chunk = std::min(step_budget_.chunk_end(from), sequence.prompt_size) - from;
  if (prefix_ && from < sequence.params.cache_point)
    chunk = std::min(chunk, sequence.params.cache_point - from);  // a state is saved there
  return chunk;
}

bool Engine::snapshot_point(const Sequence& sequence, int64_t fed) const {
  return prefix_ && (fed == sequence.prompt_size || fed == sequence.params.cache_point ||
                     (fed < sequence.prompt_size && fed % options_.prefix_snapshot_stride == 0));
}

// The drafts depend only on the request (its tokens and its k), never on the load: a verify that
// does not fit the budget waits for the next step rather than shrinking, with the same drafts, so
// a seeded request draws the same random numbers whatever else runs. At most max_tokens - 1 drafts are left to
// make, so the sequence never holds more than prompt + max_tokens - 1 tokens.
// A drafter that reads the target's hidden states reads, before every step, all the target
// sequence keeps: a propose, or else a catch_up (the prompt's chunks, at fixed offsets; one a step
// with max_prompt_chunks_per_step 1, so the head's steps do not depend on the load either). The
// sequence then holds at most the hidden states of one step's tokens, at most step_token_budget
// (a bound the CUDA model sizes its per-sequence rows by: min(max_step_tokens, positions)).
void Engine::draft_running() {
  if (load_policy_) choose_speculation_by_load();
  for (auto& entry : running_) {
    Sequence& sequence = *entry;
    if (sequence.finished || !sequence.drafter) continue;
    // A verify that waited (budget, preemption) keeps its drafts: a drafter sees each context once.
    const bool proposes = sequence.verifies_next() && sequence.drafted_for != int64_t(sequence.tokens.size());
    if (!proposes && !sequence.keep_hidden) continue;
    Draft& draft = sequence.draft;
    int64_t ask = 0;
    if (proposes) {
      sequence.drafted_for = int64_t(sequence.tokens.size());
      draft.tokens.clear();
      draft.probs.clear();
      ask = sequence.declined_by_load ? 0 : sequence.drafts_wanted();
      if (ask <= 0 && !sequence.keep_hidden) continue;
    }
    try {
      if (!sequence.drafter_started) {
        sequence.drafter->start(std::span<const int32_t>(sequence.tokens.data(), size_t(sequence.prompt_size)),
                                sequence.prompt_size + sequence.params.max_tokens);
        sequence.drafter_started = true;
      }
      sequence.drafter->set_target_sequence(sequence.state.get());
      if (ask <= 0) {
        sequence.drafter->catch_up(sequence.tokens, sequence.fed);
        continue;
      }
      sequence.drafter->propose(sequence.tokens, ask, draft);
      const int64_t drafts = int64_t(draft.tokens.size());
      VT_CHECK(drafts <= ask, "engine: the drafter proposed ", drafts, " tokens, more than the ", ask, " asked");
      VT_CHECK(draft.probs.empty() || int64_t(draft.probs.size()) == drafts * vocab_size_, "engine: the drafter gave q of ",
               draft.probs.size(), " values for ", drafts, " tokens");
      for (int32_t id : draft.tokens)
        VT_CHECK(id >= 0 && id < vocab_size_, "engine: the drafter proposed token ", id, " outside the vocabulary");
    } catch (const std::exception& error) {
      fail(sequence, std::string("drafter: ") + error.what());  // leaves at the end of this step
    }
  }
}

// The sequences about to propose drafts are the policy's candidates, each with the drafts it would
// ask for and its measured acceptance (a prior of half a draft per step until it has some); plain
// decodes and seeded sampled speculation count as fixed tokens of the step.
void Engine::choose_speculation_by_load() {
  std::vector<SpeculationLoadPolicy::Candidate> candidates;
  std::vector<Sequence*> members;
  int64_t fixed_tokens = 0;
  double fixed_emitted = 0.0;
  for (auto& entry : running_) {
    Sequence& sequence = *entry;
    sequence.declined_by_load = false;
    if (sequence.finished || !sequence.decoding()) continue;
    const bool proposes = sequence.verifies_next() && sequence.drafted_for != int64_t(sequence.tokens.size());
    const int64_t ask = proposes ? sequence.drafts_wanted() : 0;
    const double accepted =
        (double(sequence.drafts_accepted) + 0.5) / double(sequence.verifies_with_drafts + 1);
    const bool fixed = sequence.params.seeded && sequence.params.sampling.temperature > 0;
    if (ask <= 0 || fixed) {
      fixed_tokens += 1 + std::max<int64_t>(ask, 0);
      fixed_emitted += 1 + (ask > 0 ? accepted : 0.0);
      continue;
    }
    candidates.push_back({ask, accepted});
    members.push_back(&sequence);
  }
  const std::vector<bool> drafts = load_policy_->choose(fixed_tokens, fixed_emitted, candidates);
  for (size_t i = 0; i < members.size(); ++i) members[i]->declined_by_load = !drafts[i];
}

bool Engine::schedule_verify(Sequence& sequence, int64_t budget, bool* preempted_self) {
  const int64_t drafts = int64_t(sequence.draft.tokens.size());
  const auto& draft = sequence.draft;
  if (1 + drafts > budget) return false;
  while (!reserve(sequence, sequence.fed + 1 + drafts)) {
    *preempted_self = running_.back().get() == &sequence;
    preempt_youngest();  // alone it fits: fed + 1 + drafts <= prompt + max_tokens - 1
    if (*preempted_self) return false;
  }
  sequence.verify_tokens.assign(1, sequence.tokens.back());
  sequence.verify_tokens.insert(sequence.verify_tokens.end(), draft.tokens.begin(), draft.tokens.end());
  sequence.verifying = true;
  sequence.step_tokens = 1 + drafts;
  return true;
}

void Engine::drop_cancelled(std::vector<TokenEvent>& events, std::vector<TokenCallback>& callbacks) {
  auto drop = [&](auto& queue, bool cached) {
    for (auto it = queue.begin(); it != queue.end();) {
      Sequence& sequence = **it;
      if (!cancelled_.count(sequence.id)) {
        ++it;
        continue;
      }
      if (cached) cache_.release(sequence.id);
      events.push_back(sequence.ending(FinishReason::kCancelled));
      callbacks.push_back(std::move(sequence.callback));
      ++totals_.requests_cancelled;
      it = queue.erase(it);
    }
  };
  drop(waiting_, false);
  drop(running_, true);
  cancelled_.clear();  // ids already finished or unknown are ignored
}

void Engine::loop() {
  std::vector<Sequence*> scheduled;
  std::vector<TokenEvent> cancel_events;
  std::vector<TokenCallback> cancel_callbacks;
  while (true) {
    scheduled.clear();
    cancel_events.clear();
    cancel_callbacks.clear();
    draft_running();  // running_ changes only on this thread
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty() || !cancelled_.empty(); });
      if (stopping_) return;
      drop_cancelled(cancel_events, cancel_callbacks);
      if (failure_.empty()) {
        admit_waiting();
        schedule(scheduled);
      } else {
        fail_remaining(cancel_events, cancel_callbacks);  // nothing runs on the model again
      }
    }
    for (size_t i = 0; i < cancel_events.size(); ++i) cancel_callbacks[i](cancel_events[i]);
    if (!scheduled.empty()) run_step(scheduled);
    // The next turn of a conversation starts where this one's completion ends.
    if (prefix_)
      for (auto& sequence : running_)
        if (sequence->finished && sequence->final_event.error.empty() && sequence->fed > sequence->prompt_size)
          save_prefix(*sequence);
    // Finished sequences leave the cache first, so a final event means the memory is free.
    std::vector<std::unique_ptr<Sequence>> finished;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      totals_.steps += !scheduled.empty();
      for (auto it = running_.begin(); it != running_.end();) {
        if ((*it)->finished) {
          cache_.release((*it)->id);
          ++totals_.requests_finished;
          finished.push_back(std::move(*it));
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
      if (prefix_) update_prefix_stats();  // blocks the finished ones shared are the cache's alone now
    }
    for (auto& sequence : finished) sequence->callback(sequence->final_event);
  }
}

// The scheduled sequences run as batched forwards (Model::forward_batch): round r holds every
// sequence's r-th forward of this step. A prompt chunk is one forward, and so is a verify step
// (the last token and its drafts, a row of logits per token, in a rollback window); other tokens
// past the prompt (decode, or generated tokens recomputed after a preemption) are one forward
// each, so a sequence's arithmetic is the same whatever else runs. With device sampling a round is
// one Model::forward_batch_sample: rows that make a token get it drawn there (row_output), rows the
// host must see come back as logits. A failed forward fails the sequences of its batch.
void Engine::run_step(std::vector<Sequence*>& scheduled) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration duration) { return std::chrono::duration<double>(duration).count(); };
  const Clock::time_point step_start = Clock::now();
  StepRecord record;
  record.start_seconds = seconds(step_start - started_);
  record.sequences = int64_t(scheduled.size());
  for (const Sequence* sequence : scheduled)
    record.cost += step_budget_.cost(sequence->fed, sequence->fed + sequence->step_tokens);
  int64_t prompt_tokens = 0, generated_tokens = 0, recomputed_tokens = 0;
  struct VerifyRecord {
    int64_t drafts, accepted, emitted;
  };
  std::vector<VerifyRecord> verified;
  std::vector<int64_t> forwards(scheduled.size());
  int64_t rounds = 0;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    const Sequence& sequence = *scheduled[i];
    forwards[i] = sequence.decoding() && !sequence.verifying ? sequence.step_tokens : 1;
    rounds = std::max(rounds, forwards[i]);
  }
  std::vector<BatchItem> items;
  std::vector<Sequence*> members;
  std::vector<RowOutput> row_outputs;  // device sampling: what each logit row gives
  std::vector<int32_t> sampled;        // device sampling: each kToken row's token
  for (int64_t round = 0; round < rounds; ++round) {
    items.clear();
    members.clear();
    for (size_t i = 0; i < scheduled.size(); ++i) {
      Sequence* sequence = scheduled[i];
      if (round >= forwards[i] || sequence->finished) continue;
      // Hidden states are kept where the drafter will read them: not for tokens re-fed below them.
      const auto keeps = [&](int64_t tokens) {
        return sequence->keep_hidden && sequence->fed + tokens > sequence->drafter->target_hidden_needed_from();
      };
      if (sequence->verifying) {
        const bool drafts = sequence->verify_tokens.size() > 1;
        items.push_back({sequence->verify_tokens, sequence->state.get(), drafts, drafts,
                         keeps(int64_t(sequence->verify_tokens.size()))});
      } else {
        const int64_t tokens = sequence->decoding() ? 1 : sequence->step_tokens;
        items.push_back({std::span<const int32_t>(sequence->tokens.data() + sequence->fed, size_t(tokens)),
                         sequence->state.get(), false, false, keeps(tokens)});
      }
      // A saved prefix's blocks are read-only: a forward writes only blocks its sequence alone holds.
      if (!cache_.exclusive(sequence->id, sequence->fed, sequence->fed + int64_t(items.back().tokens.size()))) {
        items.pop_back();
        fail(*sequence, "engine: a forward would write a KV block shared with the prefix cache");
        continue;
      }
      members.push_back(sequence);
    }
    if (items.empty()) continue;
    ++record.forwards;
    for (size_t j = 0; j < items.size(); ++j) {
      const int64_t tokens = int64_t(items[j].tokens.size());
      if (members[j]->verifying) {
        record.verify_tokens += tokens;
      } else if (members[j]->decoding() && members[j]->fed >= members[j]->fed_most) {
        record.decode_tokens += tokens;
      } else {
        record.prefill_tokens += tokens;
      }
    }
    const int64_t rows = batch_logit_rows(items);
    if (logits_.shape()[0] < rows) logits_ = Buffer(DType::kF32, {rows, vocab_size_});
    const TensorView logits = logits_.view().rows(0, rows);
    row_outputs.clear();
    if (device_sampling_) {
      for (size_t j = 0; j < members.size(); ++j) {
        const RowOutput output = row_output(*members[j], int64_t(items[j].tokens.size()));
        row_outputs.insert(row_outputs.end(), size_t(items[j].all_logits ? items[j].tokens.size() : 1), output);
      }
      sampled.assign(size_t(rows), -1);
    }
    const Clock::time_point forward_start = Clock::now();
    try {
      if (device_sampling_) {
        model_.forward_batch_sample(items, row_outputs, sampled, logits);
        // A token outside the vocabulary means the device computed garbage: none of its tokens count.
        for (size_t r = 0; r < row_outputs.size(); ++r)
          VT_CHECK(row_outputs[r].kind != RowOutput::Kind::kToken || (sampled[r] >= 0 && sampled[r] < vocab_size_),
                   "device sampling gave token ", sampled[r], " outside the vocabulary");
      } else {
        model_.forward_batch(items, logits);
      }
      record.forward_seconds += seconds(Clock::now() - forward_start);
    } catch (const std::exception& error) {
      // A failed forward (a CUDA error, an allocation) leaves the device's state unknown: the step
      // ends here, its sequences fail with the error, and the engine takes no more work.
      record.forward_seconds += seconds(Clock::now() - forward_start);
      for (Sequence* sequence : scheduled)
        if (!sequence->finished) fail(*sequence, error.what());
      fail_engine(error.what());
      break;
    }
    int64_t row = 0;
    for (size_t j = 0; j < members.size(); ++j) {
      Sequence* sequence = members[j];
      const int64_t tokens = int64_t(items[j].tokens.size());
      float* sequence_logits = logits.f32() + row * vocab_size_;
      const bool device_token = device_sampling_ && row_outputs[size_t(row)].kind == RowOutput::Kind::kToken;
      const int32_t device_id = device_token ? sampled[size_t(row)] : -1;
      row += items[j].all_logits ? tokens : 1;
      // Tokens below the most ever fed are fed again (after a preemption); prompt tokens the first time.
      const int64_t begin = sequence->fed, end = begin + tokens;
      recomputed_tokens += std::clamp<int64_t>(sequence->fed_most - begin, 0, tokens);
      prompt_tokens += std::max<int64_t>(0, std::min(end, sequence->prompt_size) - std::max(begin, sequence->fed_most));
      sequence->fed = end;
      if (sequence->verifying) {
        const int64_t drafts = tokens - 1;
        const int64_t emitted_before = sequence->completion_tokens();
        try {
          const int64_t accepted = advance_verified(*sequence, sequence_logits);
          verified.push_back({drafts, accepted, sequence->completion_tokens() - emitted_before});
        } catch (const std::exception& error) {
          fail(*sequence, error.what());
        }
        generated_tokens += sequence->completion_tokens() - emitted_before;
      } else if (sequence->fed == int64_t(sequence->tokens.size())) {
        if (device_token) {
          if (device_id < 0 || device_id >= vocab_size_) {
            fail(*sequence, str("device sampling gave token ", device_id, " outside the vocabulary"));
          } else {
            emit(*sequence, device_id, nullptr);  // no logprobs: such requests take their logits
          }
        } else {
          advance(*sequence, sequence_logits);
        }
        ++generated_tokens;
      }
      sequence->fed_most = std::max(sequence->fed_most, sequence->fed);
      if (sequence->final_event.error.empty() && snapshot_point(*sequence, sequence->fed)) save_prefix(*sequence);
    }
  }
  record.wall_seconds = seconds(Clock::now() - step_start);
  if (step_trace_) step_trace_->write(record);
  // Steps with prompt tokens would charge their cost to the decode tokens.
  if (load_policy_ && record.prefill_tokens == 0)
    load_policy_->observe_step(record.decode_tokens + record.verify_tokens, record.forward_seconds);
  std::lock_guard<std::mutex> lock(mutex_);
  totals_.step.add(record);
  if (load_policy_) totals_.speculative.declined_by_load = load_policy_->declined();
  totals_.prompt_tokens_total += prompt_tokens;
  totals_.generation_tokens_total += generated_tokens;
  totals_.recomputed_tokens += recomputed_tokens;
  for (const VerifyRecord& record : verified)
    totals_.speculative.record_step(record.drafts, record.accepted, record.emitted);
}

void Engine::fail(Sequence& sequence, const std::string& error) {
  sequence.finished = true;
  sequence.final_event = sequence.ending(FinishReason::kStop, error);
}

void Engine::fail_engine(const std::string& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty()) return;
  failure_ = "the model's forward failed: " + error;
  std::fprintf(stderr, "vt engine: %s; failing every request, admitting none\n", failure_.c_str());
}

void Engine::fail_remaining(std::vector<TokenEvent>& events, std::vector<TokenCallback>& callbacks) {
  for (auto& sequence : running_)
    if (!sequence->finished) fail(*sequence, failure_);  // released with the finished ones, after the step
  for (auto& sequence : waiting_) {
    TokenEvent event = sequence->ending(FinishReason::kStop, failure_);
    // A preempted request has streamed tokens already: it cannot simply be sent elsewhere.
    event.retryable = sequence->completion_tokens() == 0;
    events.push_back(std::move(event));
    callbacks.push_back(std::move(sequence->callback));
  }
  waiting_.clear();
}

void Engine::bias(const Sequence& sequence, float* logits, std::span<const int32_t> drafted) const {
  for (const auto& [token, bias] : sequence.params.logit_bias) logits[token] += bias;
  sequence.penalty_state.apply(logits, vocab_size_, drafted);
}

RowOutput Engine::row_output(const Sequence& sequence, int64_t tokens) const {
  RowOutput output;
  const bool samples = sequence.fed + tokens == int64_t(sequence.tokens.size());  // the row makes a token
  const RequestParams& params = sequence.params;
  // Speculating requests (rejection sampling: every token, the prefill's too, from the host
  // Sampler's generator), logprobs, biased or penalised logits and min_p (where it applies: not
  // greedy, say a generation_config.json default under temperature 0) stay on the host.
  const bool host = sequence.drafter || params.logprobs >= 0 || !params.logit_bias.empty() || params.penalties.any() ||
                    (params.sampling.min_p > 0.0f && params.sampling.temperature > 0.0f) || sequence.constraint;
  if (sequence.verifying || (samples && host)) {
    output.kind = RowOutput::Kind::kLogits;
  } else if (samples) {
    output.kind = RowOutput::Kind::kToken;
    output.sampling = params.sampling;
    output.counter = uint64_t(sequence.completion_tokens());  // the index of the token it makes
  }
  return output;
}

void Engine::advance(Sequence& sequence, float* logits) {
  bias(sequence, logits);
  if (sequence.constraint) sequence.constraint->mask(logits, vocab_size_);
  const int32_t id = sequence.sampler.sample(logits, vocab_size_);
  if (sequence.constraint && !sequence.constraint->accept(id))
    return fail(sequence, "structured output: the grammar allows no token here");
  emit(sequence, id, logits);
}

// The step ran the last token and the drafts from length `fed - 1 - drafts`: the accepted drafts
// stay (with the last token), the rest is rolled back; the token the verify made (a correction,
// or the bonus after all drafts) runs next step. Adapts k; returns the drafts accepted.
int64_t Engine::advance_verified(Sequence& sequence, float* logits) {
  const int64_t drafts = int64_t(sequence.draft.tokens.size());
  const int64_t length = sequence.fed - 1 - drafts;
  const std::span<const int32_t> drafted(sequence.draft.tokens);
  for (int64_t row = 0; row <= drafts; ++row) bias(sequence, logits + row * vocab_size_, drafted.first(size_t(row)));
  if (sequence.constraint) {
    // Row r is masked in the state after drafts [0, r); a draft the grammar refuses has
    // probability 0 there, so verification rejects it and the rows after it go unused.
    int taken = 0;
    for (int64_t row = 0; row <= drafts; ++row) {
      sequence.constraint->mask(logits + row * vocab_size_, vocab_size_);
      if (row == drafts || !sequence.constraint->accept(sequence.draft.tokens[size_t(row)])) break;
      ++taken;
    }
    sequence.constraint->rollback(taken);
  }
  bool refused = false;
  const int64_t accepted =
      verify_drafts(sequence.sampler, logits, vocab_size_, sequence.draft, [&](int32_t id, const float* row) {
        if (sequence.constraint && !sequence.constraint->accept(id)) {
          refused = true;
          return false;
        }
        return !emit(sequence, id, row);
      });
  if (refused) fail(sequence, "structured output: the grammar allows no token here");
  sequence.fed = length + 1 + accepted;
  if (drafts > 0 && !sequence.finished) {
    model_.rollback(*sequence.state, sequence.fed);
    model_.commit(*sequence.state);
  }
  if (drafts > 0) ++sequence.verifies_with_drafts, sequence.drafts_accepted += accepted;
  if (sequence.params.adaptive_draft)
    sequence.num_draft = adapt_num_draft(sequence.num_draft, sequence.params.num_draft, drafts, accepted);
  return accepted;
}

bool Engine::emit(Sequence& sequence, int32_t id, const float* logits) {
  sequence.tokens.push_back(id);
  sequence.penalty_state.add(id);
  TokenEvent event = sequence.counted();
  event.token_id = id;
  if (sequence.params.logprobs >= 0)
    event.logprob = token_logprobs(logits, vocab_size_, id, sequence.params.logprobs, event.top_logprobs).logprob;
  const auto& stop_ids = sequence.params.stop_token_ids;
  bool string_stop = false;
  if (std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end()) {
    event.finish_reason = FinishReason::kStop;
  } else if (sequence.detokenizer) {
    StopStringFilter::Result result = sequence.stop_filter.push(sequence.detokenizer->push(id));
    event.text = std::move(result.text);
    if (result.stopped) event.finish_reason = FinishReason::kStop, string_stop = true;
  }
  if (event.finish_reason == FinishReason::kNone && event.completion_tokens >= sequence.params.max_tokens)
    event.finish_reason = FinishReason::kLength;
  if (event.finish_reason != FinishReason::kNone) {
    // Text held back for a possible stop string or a cut-off character is final now.
    if (sequence.detokenizer && !string_stop) {
      StopStringFilter::Result rest = sequence.stop_filter.push(sequence.detokenizer->finish());
      event.text += rest.text;
      if (!rest.stopped) event.text += sequence.stop_filter.finish();
    }
    event.finished = true;
    sequence.finished = true;
    sequence.final_event = std::move(event);
    return true;
  }
  sequence.callback(event);
  return false;
}

}  // namespace vt
