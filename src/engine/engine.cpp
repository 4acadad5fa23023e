// The engine loop: cancel, admit, schedule under the token budget (growing KV reservations and
// preempting the youngest request when blocks run out), forward each scheduled sequence, sample,
// stream, free.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

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

struct Engine::Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // the prompt, then each generated token
  int64_t prompt_size = 0;
  RequestParams params;
  TokenCallback callback;
  std::unique_ptr<SequenceState> state;  // made at admission
  Sampler sampler;
  std::unique_ptr<StreamingDetokenizer> detokenizer;  // null without a tokenizer
  StopStringFilter stop_filter;
  int64_t fed = 0;          // tokens through forward so far
  int64_t step_tokens = 0;  // tokens scheduled this step
  int64_t preemptions = 0;  // times sent back to the queue (then re-fed from token 0)
  bool finished = false;
  TokenEvent final_event;  // delivered once the cache entries are freed

  Sequence(const RequestParams& request, const Tokenizer* tokenizer)
      : params(request), sampler(request.sampling), stop_filter(request.stop_strings) {
    if (tokenizer) detokenizer = std::make_unique<StreamingDetokenizer>(*tokenizer, /*skip_special_tokens=*/true);
  }
  int64_t completion_tokens() const { return int64_t(tokens.size()) - prompt_size; }
  // Past the prompt, tokens are fed one per forward (as decode fed them), so after a preemption
  // the re-fed generated tokens give the same state, bit for bit, as the first time.
  bool decoding() const { return fed >= prompt_size; }
};

Engine::Engine(Model& model, const Tokenizer* tokenizer, const EngineOptions& options)
    : model_(model), tokenizer_(tokenizer), options_(options), vocab_size_(model.info().vocab_size),
      cache_(options.cache_blocks, options.block_size, options.max_running),
      logits_(DType::kF32, {std::max<int64_t>(1, options.max_running), model.info().vocab_size}) {
  VT_CHECK(options.max_running >= 1, "engine: max_running must be >= 1");
  VT_CHECK(options.prefill_chunk >= 1, "engine: prefill_chunk must be >= 1");
  VT_CHECK(options.step_token_budget >= options.prefill_chunk, "engine: the step token budget (",
           options.step_token_budget, ") must hold one prefill chunk (", options.prefill_chunk, ")");
  watermark_blocks_ = options.admission_watermark_blocks >= 0 ? options.admission_watermark_blocks
                                                              : options.cache_blocks / 100;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  TokenEvent event;
  event.finished = true;
  event.finish_reason = FinishReason::kCancelled;
  for (auto& sequence : running_) {
    event.prompt_tokens = sequence->prompt_size;
    event.completion_tokens = sequence->completion_tokens();
    sequence->callback(event);
  }
  for (auto& sequence : waiting_) {
    event.prompt_tokens = sequence->prompt_size;
    event.completion_tokens = sequence->completion_tokens();  // preempted ones have some
    sequence->callback(event);
  }
}

int64_t Engine::max_request_tokens() const {
  return std::min(model_.info().max_positions, options_.cache_blocks * options_.block_size);
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
  for (const auto& [id, bias] : params.logit_bias)
    VT_CHECK(id >= 0 && id < vocab_size_ && std::isfinite(bias), "logit_bias: token ", id, " (bias ", bias,
             ") must lie in [0, ", vocab_size_, ") with a finite bias");
  auto sequence = std::make_unique<Sequence>(params, tokenizer_);  // validates sampling params
  sequence->prompt_size = int64_t(prompt.size());
  sequence->tokens = std::move(prompt);
  sequence->tokens.reserve(size_t(total));
  sequence->callback = std::move(callback);
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    VT_CHECK(!stopping_, "the engine is shutting down");
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
  return stats;
}

// First come, first served: the head of the queue waits until it fits, and nothing passes it.
// Preempted requests wait at the head, so they come back before anything newer.
void Engine::admit_waiting() {
  while (!waiting_.empty() && int64_t(running_.size()) < options_.max_running) {
    Sequence& head = *waiting_.front();
    const int64_t context = int64_t(head.tokens.size());  // the prompt, plus what a preempted one generated
    if (options_.reservation == EngineOptions::Reservation::kFull) {
      if (!cache_.admit(head.id, head.prompt_size, head.params.max_tokens)) break;
    } else {
      const int64_t watermark = running_.empty() ? 0 : watermark_blocks_;
      if (cache_.free_blocks() < cache_.blocks_for(context) + watermark) break;
      if (!cache_.admit(head.id, context, 0)) break;
    }
    head.state = model_.new_sequence(head.prompt_size + head.params.max_tokens);
    head.fed = 0;
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
  ++victim->preemptions;
  ++totals_.preemptions;
  waiting_.push_front(std::move(victim));
}

// Decode tokens first (one each, in admission order; each reserves the block it writes into,
// preempting the youngest when none is free), then tokens a resumed request re-feeds, then prompt
// chunks while the budget lasts.
void Engine::schedule(std::vector<Sequence*>& scheduled) {
  int64_t budget = options_.step_token_budget;
  for (auto& sequence : running_) sequence->step_tokens = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& sequence = *running_[i];
    if (!sequence.decoding() || budget < 1) continue;
    bool preempted_self = false;
    while (!cache_.reserve(sequence.id, sequence.fed + 1)) {
      preempted_self = running_.back().get() == &sequence;
      preempt_youngest();  // never the last one standing: submit() checked a request fits alone
      if (preempted_self) break;
    }
    if (preempted_self) break;  // everything after it is gone too
    sequence.step_tokens = 1;
    budget -= 1;
  }
  for (auto& sequence : running_) {
    if (!sequence->decoding()) continue;
    const int64_t refeed = int64_t(sequence->tokens.size()) - sequence->fed - sequence->step_tokens;
    const int64_t extra = std::min(refeed, budget);
    if (extra <= 0) continue;
    sequence->step_tokens += extra;  // blocks held since admission
    budget -= extra;
  }
  for (auto& sequence : running_)
    if (sequence->step_tokens > 0) scheduled.push_back(sequence.get());
  for (auto& sequence : running_) {
    if (sequence->decoding()) continue;
    const int64_t chunk = std::min(options_.prefill_chunk, sequence->prompt_size - sequence->fed);
    if (chunk > budget && !scheduled.empty()) break;
    sequence->step_tokens = chunk;
    budget -= chunk;
    scheduled.push_back(sequence.get());
  }
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
      TokenEvent event;
      event.finished = true;
      event.finish_reason = FinishReason::kCancelled;
      event.prompt_tokens = sequence.prompt_size;
      event.completion_tokens = sequence.completion_tokens();
      events.push_back(event);
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
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty() || !cancelled_.empty(); });
      if (stopping_) return;
      drop_cancelled(cancel_events, cancel_callbacks);
      admit_waiting();
      schedule(scheduled);
    }
    for (size_t i = 0; i < cancel_events.size(); ++i) cancel_callbacks[i](cancel_events[i]);
    if (scheduled.empty()) continue;
    run_step(scheduled);
    // Finished sequences leave the cache first, so a final event means the memory is free.
    std::vector<std::unique_ptr<Sequence>> finished;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++totals_.steps;
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
    }
    for (auto& sequence : finished) sequence->callback(sequence->final_event);
  }
}

// The scheduled sequences run as batched forwards (Model::forward_batch): round r holds every
// sequence's r-th forward of this step. A prompt chunk is one forward; tokens past the prompt
// (decode, or generated tokens recomputed after a preemption) are one forward each, so a
// sequence's arithmetic is the same whatever else runs. A failed forward fails the sequences of
// its batch.
void Engine::run_step(std::vector<Sequence*>& scheduled) {
  int64_t prompt_tokens = 0, generated_tokens = 0, recomputed_tokens = 0;
  std::vector<int64_t> forwards(scheduled.size());
  int64_t rounds = 0;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    forwards[i] = scheduled[i]->decoding() ? scheduled[i]->step_tokens : 1;
    rounds = std::max(rounds, forwards[i]);
  }
  std::vector<BatchItem> items;
  std::vector<Sequence*> members;
  for (int64_t round = 0; round < rounds; ++round) {
    items.clear();
    members.clear();
    for (size_t i = 0; i < scheduled.size(); ++i) {
      Sequence* sequence = scheduled[i];
      if (round >= forwards[i] || sequence->finished) continue;
      const int64_t tokens = sequence->decoding() ? 1 : sequence->step_tokens;
      items.push_back({std::span<const int32_t>(sequence->tokens.data() + sequence->fed, size_t(tokens)),
                       sequence->state.get()});
      members.push_back(sequence);
    }
    if (items.empty()) continue;
    const TensorView logits = logits_.view().rows(0, int64_t(items.size()));
    try {
      model_.forward_batch(items, logits);
    } catch (const std::exception& error) {
      for (Sequence* sequence : members) {
        TokenEvent event;
        event.finished = true;
        event.finish_reason = FinishReason::kStop;
        event.prompt_tokens = sequence->prompt_size;
        event.completion_tokens = sequence->completion_tokens();
        event.error = error.what();
        sequence->finished = true;
        sequence->final_event = std::move(event);
      }
      continue;
    }
    for (size_t j = 0; j < members.size(); ++j) {
      Sequence* sequence = members[j];
      const int64_t tokens = int64_t(items[j].tokens.size());
      if (sequence->preemptions > 0) recomputed_tokens += tokens;
      else if (sequence->fed < sequence->prompt_size) prompt_tokens += tokens;
      sequence->fed += tokens;
      if (sequence->fed == int64_t(sequence->tokens.size())) {
        advance(*sequence, logits.f32() + int64_t(j) * vocab_size_);
        ++generated_tokens;
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  totals_.prompt_tokens_total += prompt_tokens;
  totals_.generation_tokens_total += generated_tokens;
  totals_.recomputed_tokens += recomputed_tokens;
}

void Engine::advance(Sequence& sequence, float* logits) {
  for (const auto& [token, bias] : sequence.params.logit_bias) logits[token] += bias;
  const int32_t id = sequence.sampler.sample(logits, vocab_size_);
  sequence.tokens.push_back(id);
  TokenEvent event;
  event.token_id = id;
  if (sequence.params.logprobs >= 0)
    event.logprob = token_logprobs(logits, vocab_size_, id, sequence.params.logprobs, event.top_logprobs).logprob;
  event.prompt_tokens = sequence.prompt_size;
  event.completion_tokens = sequence.completion_tokens();
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
    return;
  }
  sequence.callback(event);
}

}  // namespace vt
