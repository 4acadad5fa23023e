// The step budget by cost (engine/step_budget.h): C from a model's shape; chunk boundaries fixed
// by the position alone, every multiple of prefill_chunk among them; on the tiny golden Qwen3.5
// model, a long prompt's chunks shrink with depth so that every step stays within the cost budget
// while the decoding requests beside it keep one token per step, outputs equal to running alone,
// and a prompt restored from a prefix snapshot in the shrunk chunks gives the same tokens. With
// several chunks a step (EngineOptions::max_prompt_chunks_per_step) a prompt takes its next chunks
// while the budgets hold them, ending its steps at every prefix snapshot point, with the same
// outputs as one chunk a step.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/step_budget.h"
#include "models/registry.h"

namespace vt {
namespace {

const std::string kModelDir = std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_dense";

// The cost of positions [begin, end) at context C, summed token by token (not StepBudget's sum).
double cost_of(int64_t begin, int64_t end, double context) {
  double cost = 0;
  for (int64_t p = begin; p < end; ++p) cost += 1.0 + double(p) / context;
  return cost;
}

TEST(StepBudget, ContextFromTheModelsShape) {
  ModelInfo info;
  EXPECT_EQ(attention_cost_context(info), 0);  // nothing known: tokens alone
  // SmolLM2-135M: 30 layers of H 576, 9 heads of 64, 3 KV heads, MLP 1536.
  info.layer_weights_per_token = 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536);
  info.attention_layers = 30, info.attention_heads = 9, info.attention_head_dim = 64;
  EXPECT_EQ(attention_cost_context(info), 3072);
}

TEST(StepBudget, ChunkBoundariesDependOnThePositionAlone) {
  for (int64_t context : {0, 64, 3072}) {
    const StepBudget budget(context, 128, 64, 16);
    EXPECT_NEAR(budget.cost(100, 164), context ? cost_of(100, 164, double(context)) : 64.0, 1e-6);
    std::vector<int64_t> boundaries;  // a prompt fed from token 0
    for (int64_t fed = 0; fed < 4096; fed = budget.chunk_end(fed)) boundaries.push_back(fed);
    for (int64_t multiple = 0; multiple < 4096; multiple += 64)
      EXPECT_TRUE(std::binary_search(boundaries.begin(), boundaries.end(), multiple)) << multiple;
    for (size_t i = 0; i + 1 < boundaries.size(); ++i) {
      const int64_t size = boundaries[i + 1] - boundaries[i];
      EXPECT_GE(size, 16);
      EXPECT_LE(size, 64);
      // Within the chunk limit unless already the smallest chunk.
      if (size > 16) {
        EXPECT_LE(budget.cost(boundaries[i], boundaries[i + 1]), budget.chunk_limit() + 1e-9);
      }
      // Fed from anywhere inside a chunk (a restored prefix), it ends where it would from 0.
      for (int64_t fed = boundaries[i]; fed < boundaries[i + 1]; ++fed)
        ASSERT_EQ(budget.chunk_end(fed), boundaries[i + 1]) << "context " << context << " fed " << fed;
    }
    if (context == 0) {
      EXPECT_EQ(boundaries.size(), 4096u / 64);  // tokens alone: whole chunks
    }
  }
  // Below context C a chunk is whole; past it chunks shrink.
  const StepBudget budget(3072, 128, 64, 16);
  EXPECT_EQ(budget.piece(0), 64);
  EXPECT_EQ(budget.piece(3008), 64);
  EXPECT_EQ(budget.piece(8192 - 64), 32);
  EXPECT_EQ(budget.piece(16384), 16);
}

// Runs the golden model and records each batched forward: the sequences' states, where each
// item starts and how many tokens it runs.
class RecordingModel final : public Model {
 public:
  struct Item {
    const SequenceState* state;
    int64_t begin, tokens;
  };
  explicit RecordingModel(Model& inner) : inner_(inner) {}
  const ModelInfo& info() const override { return inner_.info(); }
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const override {
    return inner_.new_sequence(capacity);
  }
  void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
               const ForwardOptions& options) override {
    inner_.forward(tokens, state, logits, options);
  }
  void forward_batch(std::span<const BatchItem> items, const TensorView& logits) override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      waiting_ = true;
      signal_.notify_all();
      signal_.wait(lock, [&] { return !held_; });
      waiting_ = false;
      auto& step = steps_.emplace_back();
      for (const BatchItem& item : items) step.push_back({item.state, item.state->length(), int64_t(item.tokens.size())});
    }
    inner_.forward_batch(items, logits);
  }
  std::string describe() const override { return inner_.describe(); }
  bool supports_prefix_cache() const override { return inner_.supports_prefix_cache(); }
  std::unique_ptr<StateSnapshot> save_state(const SequenceState& state) override { return inner_.save_state(state); }
  void restore_state(const StateSnapshot& snapshot, SequenceState& state) override {
    inner_.restore_state(snapshot, state);
  }
  std::vector<std::vector<Item>> steps() {
    std::lock_guard<std::mutex> lock(mutex_);
    return steps_;
  }
  // hold(): forwards wait until release(); wait_held() returns once one is waiting. A request
  // submitted in between arrives while the step before it is being made.
  void hold() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = true;
  }
  void wait_held() {
    std::unique_lock<std::mutex> lock(mutex_);
    signal_.wait(lock, [&] { return waiting_; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = false;
    signal_.notify_all();
  }

 private:
  Model& inner_;
  std::mutex mutex_;
  std::condition_variable signal_;
  bool held_ = false, waiting_ = false;
  std::vector<std::vector<Item>> steps_;
};

struct Outcome {
  std::mutex mutex;
  std::condition_variable done_signal;
  std::vector<int32_t> ids;
  TokenEvent last;
  bool done = false;

  TokenCallback callback() {
    return [this](const TokenEvent& event) {
      std::lock_guard<std::mutex> lock(mutex);
      if (event.token_id >= 0) ids.push_back(event.token_id);
      if (event.finished) {
        last = event;
        done = true;
        done_signal.notify_all();
      }
    };
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(done_signal.wait_for(lock, std::chrono::seconds(120), [&] { return done; }));
  }
};

std::vector<int32_t> prompt_of(uint32_t seed, int64_t length, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (auto& id : ids) id = int32_t(rng() % vocab);
  return ids;
}

class EngineStepBudget : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = load_model(kModelDir, {}).release(); }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;

  // Chunks of 32, 48 tokens a step, C = 64 (the golden model's own C is past its 512 positions):
  // a step may cost 96 units, a chunk 64.
  static EngineOptions options() {
    EngineOptions options;
    options.prefill_chunk = 32;
    options.step_token_budget = 48;
    options.min_prefill_chunk = 4;
    options.step_cost_context = 64;
    options.max_running = 8;
    options.cache_blocks = 256;
    return options;
  }
  static std::vector<int32_t> alone(const EngineOptions& options, const std::vector<int32_t>& prompt,
                                    int64_t max_tokens) {
    Engine engine(*model_, nullptr, options);
    Outcome outcome;
    RequestParams params;
    params.max_tokens = max_tokens;
    engine.submit(prompt, params, outcome.callback());
    outcome.wait();
    return outcome.ids;
  }

  struct Run {
    std::vector<std::vector<RecordingModel::Item>> steps;
    std::vector<std::vector<int32_t>> outputs;  // the short requests', then the long one's
  };
  // Three short requests (6-token prompts, `short_tokens` each, seeds seed..seed+2) decode while a
  // `long_length`-token prompt (seed + 10) is fed. long_first: the long prompt is submitted first
  // and its first step is made before the short ones are submitted (it runs alone, whatever the
  // threads' timing).
  static Run short_streams_beside_a_long_prompt(const EngineOptions& options, int64_t long_length = 448,
                                                int64_t short_tokens = 100, uint32_t seed = 10,
                                                bool long_first = false) {
    RecordingModel recording(*model_);
    const int64_t vocab = model_->info().vocab_size;
    std::vector<Outcome> outcomes(4);
    {
      Engine engine(recording, nullptr, options);
      RequestParams params;
      const auto submit_long = [&] {
        RequestParams long_params = params;
        long_params.max_tokens = 4;
        engine.submit(prompt_of(seed + 10, long_length, vocab), long_params, outcomes[3].callback());
      };
      if (long_first) {
        recording.hold();
        submit_long();
        recording.wait_held();
      }
      params.max_tokens = short_tokens;
      for (uint32_t i = 0; i < 3; ++i) engine.submit(prompt_of(seed + i, 6, vocab), params, outcomes[i].callback());
      if (long_first)
        recording.release();
      else
        submit_long();
      for (auto& outcome : outcomes) outcome.wait();
    }
    Run run;
    run.steps = recording.steps();
    for (auto& outcome : outcomes) run.outputs.push_back(outcome.ids);
    return run;
  }
};
Model* EngineStepBudget::model_ = nullptr;

TEST_F(EngineStepBudget, LongPromptChunksShrinkSoEveryStepStaysWithinTheCost) {
  const EngineOptions engine_options = options();
  const double step_limit = 2.0 * double(engine_options.step_token_budget);
  const double chunk_limit = 2.0 * double(engine_options.prefill_chunk);
  const double context = double(engine_options.step_cost_context);
  const Run run = short_streams_beside_a_long_prompt(engine_options);

  // The long prompt's state is the one fed past 200 tokens; the others decode (to 106).
  const SequenceState* long_state = nullptr;
  for (const auto& step : run.steps)
    for (const auto& item : step)
      if (item.begin >= 200) long_state = item.state;
  ASSERT_NE(long_state, nullptr);
  std::vector<std::pair<int64_t, int64_t>> chunks;  // the long prompt's: where each starts, its tokens
  std::vector<size_t> chunk_steps;
  std::map<const SequenceState*, std::vector<size_t>> decode_steps;  // the short requests' steps
  double most = 0;
  for (size_t index = 0; index < run.steps.size(); ++index) {
    double cost = 0;
    for (const auto& item : run.steps[index]) {
      cost += cost_of(item.begin, item.begin + item.tokens, context);
      if (item.state == long_state && item.begin < 448) {
        chunks.push_back({item.begin, item.tokens});
        chunk_steps.push_back(index);
        EXPECT_LE(cost_of(item.begin, item.begin + item.tokens, context), chunk_limit) << "chunk at " << item.begin;
      } else if (item.state != long_state && item.begin >= 6) {
        decode_steps[item.state].push_back(index);
        EXPECT_EQ(item.tokens, 1);
      }
    }
    most = std::max(most, cost);
    EXPECT_LE(cost, step_limit) << "step " << index;
  }
  // Each short request decodes in every step from its first token to its last (99 after the one
  // its prompt gave), through the whole of the long prompt's feed.
  ASSERT_EQ(decode_steps.size(), 3u);
  for (const auto& [state, steps] : decode_steps) {
    ASSERT_EQ(steps.size(), 99u);
    EXPECT_EQ(steps.back() - steps.front(), 98u) << "a decoding request skipped a step";
  }
  int64_t fed = 0;
  std::map<int64_t, int64_t> widest;  // per 32-token window, its widest chunk
  for (const auto& [begin, tokens] : chunks) {
    EXPECT_EQ(begin, fed);
    fed += tokens;
    EXPECT_GE(tokens, 4);  // never below min_prefill_chunk
    widest[begin / 32] = std::max(widest[begin / 32], tokens);
  }
  EXPECT_EQ(fed, 448);
  ASSERT_GE(chunk_steps.size(), 2u);
  EXPECT_EQ(widest[0], 32);   // the prompt's start: whole chunks
  EXPECT_EQ(widest[13], 8);   // 416 and more deep a token costs 7.5 units and more
  for (const auto& [window, tokens] : widest)
    if (window > 0) {
      EXPECT_LE(tokens, widest[window - 1]) << "window " << window;
    }
  // The short requests decoded beside all of it but the first chunk (which may share a step with
  // their prompts, as they arrive).
  for (const auto& [state, steps] : decode_steps)
    EXPECT_TRUE(steps.front() <= chunk_steps[1] && chunk_steps.back() <= steps.back());
  std::printf("%zu chunks, %lld steps, most costly step %.1f of %.0f\n", chunks.size(), (long long)run.steps.size(),
              most, step_limit);

  // Each request gives what it gives alone.
  const int64_t vocab = model_->info().vocab_size;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(run.outputs[size_t(i)], alone(engine_options, prompt_of(10 + i, 6, vocab), 100));
  EXPECT_EQ(run.outputs[3], alone(engine_options, prompt_of(20, 448, vocab), 4));

  // Tokens alone (C = 0): whole chunks, and steps deep in the prompt cost far past the limit.
  EngineOptions tokens_alone = engine_options;
  tokens_alone.step_cost_context = 0;
  const Run before = short_streams_beside_a_long_prompt(tokens_alone);
  double most_before = 0;
  for (const auto& step : before.steps) {
    double cost = 0;
    for (const auto& item : step) cost += cost_of(item.begin, item.begin + item.tokens, context);
    most_before = std::max(most_before, cost);
  }
  EXPECT_GT(most_before, 2 * step_limit);
}

// Prefix snapshots every 64 tokens land on chunk boundaries however far the chunks shrank; a
// prompt that extends one starts there and gives the tokens it gives computed from token 0.
TEST_F(EngineStepBudget, PrefixSnapshotsInShrunkChunks) {
  EngineOptions engine_options = options();
  const int64_t vocab = model_->info().vocab_size;
  const std::vector<int32_t> first = prompt_of(30, 400, vocab);
  std::vector<int32_t> second(first.begin(), first.begin() + 300);
  for (int32_t id : prompt_of(31, 20, vocab)) second.push_back(id);
  const std::vector<int32_t> expected = alone(engine_options, second, 8);
  engine_options.prefix_cache = true;
  engine_options.prefix_snapshot_stride = 64;
  Engine engine(*model_, nullptr, engine_options);
  Outcome one, two;
  RequestParams params;
  params.max_tokens = 4;
  engine.submit(first, params, one.callback());
  one.wait();
  params.max_tokens = 8;
  engine.submit(second, params, two.callback());
  two.wait();
  EXPECT_EQ(two.last.cached_tokens, 256);  // the last multiple of 64 the two prompts share
  EXPECT_EQ(two.ids, expected);
}


// ---- Several chunks of one prompt a step (EngineOptions::max_prompt_chunks_per_step) ----

// vt serve's GPU shape, scaled to the golden model's 512 positions: chunks of 32, a step of four
// of them plus one token per running request, tokens alone (C = 0) unless a test sets C.
EngineOptions chunks_per_step_options(int64_t chunks_per_step) {
  EngineOptions options;
  options.prefill_chunk = 32;
  options.max_running = 4;
  options.step_token_budget = 4 * 32 + 4;
  options.step_cost_context = 0;
  options.cache_blocks = 256;
  options.max_prompt_chunks_per_step = chunks_per_step;
  return options;
}

// The prompt forwards of `state` in steps [first_step, end): where each starts and ends.
std::vector<std::pair<int64_t, int64_t>> prompt_spans(const std::vector<std::vector<RecordingModel::Item>>& steps,
                                                      const SequenceState* state, int64_t prompt_size,
                                                      size_t first_step = 0) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (size_t index = first_step; index < steps.size(); ++index)
    for (const auto& item : steps[index])
      if (item.state == state && item.begin < prompt_size) spans.push_back({item.begin, item.begin + item.tokens});
  return spans;
}

// The spans of a prompt of `size` fed from `from` in steps of `step` tokens (whole chunks).
std::vector<std::pair<int64_t, int64_t>> even_spans(int64_t from, int64_t size, int64_t step) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (int64_t begin = from; begin < size; begin += step) spans.push_back({begin, std::min(size, begin + step)});
  return spans;
}

// A lone 470-token prompt: one chunk a step is the schedule the engine always had; k chunks a step
// feed it k * 32 tokens a step, up to the four the token budget holds (8 asked: still 4); the
// greedy tokens are the same.
TEST_F(EngineStepBudget, LonePromptTakesSeveralChunksAStep) {
  const std::vector<int32_t> prompt = prompt_of(40, 470, model_->info().vocab_size);
  std::vector<int32_t> one_chunk_ids;
  for (int64_t chunks : {1, 2, 4, 8}) {
    SCOPED_TRACE("chunks per step " + std::to_string(chunks));
    RecordingModel recording(*model_);
    Outcome outcome;
    {
      Engine engine(recording, nullptr, chunks_per_step_options(chunks));
      RequestParams params;
      params.max_tokens = 8;
      engine.submit(prompt, params, outcome.callback());
      outcome.wait();
    }
    const auto steps = recording.steps();
    ASSERT_FALSE(steps.empty());
    const SequenceState* state = steps[0][0].state;
    const int64_t step_tokens = 32 * std::min<int64_t>(chunks, 4);
    EXPECT_EQ(prompt_spans(steps, state, 470), even_spans(0, 470, step_tokens));
    for (const auto& step : steps) EXPECT_EQ(step.size(), 1u);  // one forward a step: nothing else runs
    EXPECT_EQ(steps.size(), size_t((470 + step_tokens - 1) / step_tokens) + 7);  // then 7 decode steps
    EXPECT_EQ(outcome.last.error, "");
    ASSERT_EQ(outcome.ids.size(), 8u);
    if (chunks == 1) one_chunk_ids = outcome.ids;
    EXPECT_EQ(outcome.ids, one_chunk_ids);
  }
}

// With the prefix cache every step ends where a state is saved: each prefix_snapshot_stride (128)
// tokens and the request's cache point (300, inside a chunk), the prompt's end; a prompt that
// extends the cache point starts there and gives the tokens it gives computed from token 0 a chunk
// a step.
TEST_F(EngineStepBudget, SeveralChunksAStepEndAtEverySnapshotPoint) {
  const int64_t vocab = model_->info().vocab_size;
  const std::vector<int32_t> first = prompt_of(41, 470, vocab);
  std::vector<int32_t> second(first.begin(), first.begin() + 300);
  for (int32_t id : prompt_of(42, 40, vocab)) second.push_back(id);
  RequestParams params;
  params.max_tokens = 6;
  const std::vector<int32_t> expected = alone(chunks_per_step_options(1), second, 6);
  EngineOptions options = chunks_per_step_options(4);
  options.prefix_cache = true;
  options.prefix_snapshot_stride = 128;
  RecordingModel recording(*model_);
  Outcome one, two;
  size_t second_start = 0;
  {
    Engine engine(recording, nullptr, options);
    params.cache_point = 300;
    engine.submit(first, params, one.callback());
    one.wait();
    second_start = recording.steps().size();
    params.cache_point = 0;
    engine.submit(second, params, two.callback());
    two.wait();
    EXPECT_GE(engine.stats().prefix.snapshots, 4);
  }
  const auto steps = recording.steps();
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 128}, {128, 256}, {256, 300}, {300, 384}, {384, 470}};
  EXPECT_EQ(prompt_spans(steps, steps[0][0].state, 470), want);
  EXPECT_EQ(one.last.error, "");
  EXPECT_EQ(one.ids, alone(chunks_per_step_options(1), first, 6));
  // The second prompt: from the cache point, its chunk's rest (300-320) and the next chunk, ending
  // at its end (340), in one step.
  ASSERT_GT(steps.size(), second_start);
  const auto second_spans = prompt_spans(steps, steps[second_start][0].state, 340, second_start);
  EXPECT_EQ(second_spans, (std::vector<std::pair<int64_t, int64_t>>{{300, 340}}));
  EXPECT_EQ(two.last.cached_tokens, 300);
  EXPECT_EQ(two.ids, expected);
}

// Three requests decode while a 470-token prompt is fed (up to four chunks a step allowed): each
// decodes in every step from its first token to its last, the prompt takes one chunk in every
// step they decode in, no step passes the token budget, and every request gives what it gives
// alone a chunk a step.
TEST_F(EngineStepBudget, BesideDecodesAPromptTakesOneChunkAStep) {
  const int64_t vocab = model_->info().vocab_size;
  const EngineOptions options = chunks_per_step_options(4);
  const Run run = short_streams_beside_a_long_prompt(options, 470, 40, 50, /*long_first=*/true);
  const auto& steps = run.steps;
  const SequenceState* long_state = nullptr;
  for (const auto& step : steps)
    for (const auto& item : step)
      if (item.begin >= 100) long_state = item.state;
  ASSERT_NE(long_state, nullptr);
  std::map<const SequenceState*, std::vector<size_t>> decode_steps;
  size_t last_prompt_step = 0;
  for (size_t index = 0; index < steps.size(); ++index) {
    int64_t tokens = 0, prompt_tokens = 0;
    bool decodes = false;
    for (const auto& item : steps[index]) {
      tokens += item.tokens;
      if (item.state == long_state && item.begin < 470) last_prompt_step = index, prompt_tokens = item.tokens;
      if (item.state != long_state && item.begin >= 6) {
        decode_steps[item.state].push_back(index);
        EXPECT_EQ(item.tokens, 1);
        decodes = true;
      }
    }
    EXPECT_LE(tokens, options.step_token_budget) << "step " << index;
    // Beside decoding requests the prompt takes one chunk a step (each extra chunk would lengthen
    // the gaps between their tokens); only the first step, all prompts, may hold several.
    if (decodes) {
      EXPECT_LE(prompt_tokens, 32) << "step " << index;
    }
  }
  ASSERT_EQ(decode_steps.size(), 3u);
  for (const auto& [state, indices] : decode_steps) {
    ASSERT_EQ(indices.size(), 39u);
    EXPECT_EQ(indices.back() - indices.front(), 38u) << "a decoding request skipped a step";
    EXPECT_LT(indices.front(), last_prompt_step);  // it decoded beside the prompt's chunks
  }
  // The long prompt: whole chunks from where the one before ended.
  const auto spans = prompt_spans(steps, long_state, 470);
  int64_t fed = 0;
  for (const auto& [begin, end] : spans) {
    EXPECT_EQ(begin, fed);
    EXPECT_TRUE(end % 32 == 0 || end == 470) << end;
    fed = end;
  }
  EXPECT_EQ(fed, 470);
  EXPECT_EQ(spans.front(), (std::pair<int64_t, int64_t>{0, 128}));  // its first step, alone: four chunks
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(run.outputs[size_t(i)], alone(chunks_per_step_options(1), prompt_of(50 + i, 6, vocab), 40));
  EXPECT_EQ(run.outputs[3], alone(chunks_per_step_options(1), prompt_of(60, 470, vocab), 4));
}

// Past context C the cost binds: a lone 448-token prompt at C = 64, up to eight chunks a step
// (their pieces shrink with depth, so the token budget alone would hold eight): it takes its next
// chunks only while the step's cost holds them, so no step costs more than the limit, steps deep in
// the prompt still carry several chunks, and the tokens are those of one chunk a step.
TEST_F(EngineStepBudget, SeveralChunksAStepWithinTheCost) {
  const std::vector<int32_t> prompt = prompt_of(70, 448, model_->info().vocab_size);
  std::vector<int32_t> one_chunk_ids;
  size_t one_chunk_steps = 0;
  for (int64_t chunks : {1, 8}) {
    SCOPED_TRACE("chunks per step " + std::to_string(chunks));
    EngineOptions options = chunks_per_step_options(chunks);
    options.step_cost_context = 64;
    options.min_prefill_chunk = 4;
    RecordingModel recording(*model_);
    Outcome outcome;
    {
      Engine engine(recording, nullptr, options);
      RequestParams params;
      params.max_tokens = 4;
      engine.submit(prompt, params, outcome.callback());
      outcome.wait();
    }
    const auto steps = recording.steps();
    const auto spans = prompt_spans(steps, steps[0][0].state, 448);
    const double step_limit = 2.0 * double(options.step_token_budget);
    const StepBudget budget(64, options.step_token_budget, 32, 4);
    int64_t fed = 0, stopped_by_cost = 0, deep_several = 0;
    for (const auto& [begin, end] : spans) {
      EXPECT_EQ(begin, fed);
      fed = end;
      EXPECT_LE(cost_of(begin, end, 64.0), step_limit) << "step at " << begin;
      int64_t pieces = 0;
      for (int64_t at = begin; at < end; at = budget.chunk_end(at)) ++pieces;
      EXPECT_EQ(budget.chunk_end(end - 1), end) << "a step ends inside a chunk";
      EXPECT_LE(pieces, chunks);
      deep_several += begin >= 256 && pieces > 1;
      // A step of fewer chunks than allowed stops where one more would pass the token budget or
      // the cost limit.
      if (end == 448 || pieces == chunks) continue;
      const int64_t next = budget.chunk_end(end);
      const bool over_cost = cost_of(begin, next, 64.0) > step_limit;
      EXPECT_TRUE(next - begin > options.step_token_budget || over_cost) << "step at " << begin;
      stopped_by_cost += over_cost;
    }
    EXPECT_EQ(fed, 448);
    if (chunks == 1) {
      one_chunk_steps = spans.size();
    } else {
      EXPECT_GT(stopped_by_cost, 0);
      EXPECT_GT(deep_several, 0);
      EXPECT_LT(spans.size(), one_chunk_steps);
    }
    std::printf("%lld chunks a step: %zu prompt steps, %lld stopped by the cost\n", (long long)chunks, spans.size(),
                (long long)stopped_by_cost);
    ASSERT_EQ(outcome.ids.size(), 4u);
    if (chunks == 1) one_chunk_ids = outcome.ids;
    EXPECT_EQ(outcome.ids, one_chunk_ids);
  }
}

// A 40-token prompt arrives while a lone 470-token prompt's first step runs: it is fed the next
// step, beside the long prompt's next chunk, whatever the chunks a step (the long prompt's extra
// chunks come after every prompt's next one, not before; they held it back until the long prompt
// was nearly all fed). Chunks of 32 at 1 and 4 a step, and vt serve's CPU shape (chunks of 64, 128
// tokens a step, its 2 chunks a step).
TEST_F(EngineStepBudget, APromptArrivingMidWayIsFedTheNextStep) {
  const int64_t vocab = model_->info().vocab_size;
  EngineOptions cpu_serve = chunks_per_step_options(1);
  cpu_serve.prefill_chunk = 64;
  cpu_serve.step_token_budget = 128;
  cpu_serve.max_prompt_chunks_per_step = serving_prompt_chunks_per_step(cpu_serve, false);
  ASSERT_EQ(cpu_serve.max_prompt_chunks_per_step, 2);
  for (const EngineOptions& options : {chunks_per_step_options(1), chunks_per_step_options(4), cpu_serve}) {
    SCOPED_TRACE("chunks of " + std::to_string(options.prefill_chunk) + ", " +
                 std::to_string(options.max_prompt_chunks_per_step) + " a step");
    RecordingModel recording(*model_);
    Outcome long_outcome, short_outcome;
    {
      Engine engine(recording, nullptr, options);
      RequestParams params;
      params.max_tokens = 4;
      recording.hold();
      engine.submit(prompt_of(80, 470, vocab), params, long_outcome.callback());
      recording.wait_held();  // the long prompt's first step is made and waits to run
      engine.submit(prompt_of(81, 40, vocab), params, short_outcome.callback());
      recording.release();
      long_outcome.wait();
      short_outcome.wait();
    }
    EXPECT_EQ(long_outcome.last.error, "");
    EXPECT_EQ(short_outcome.last.error, "");
    const auto steps = recording.steps();
    ASSERT_GE(steps.size(), 2u);
    ASSERT_EQ(steps[0].size(), 1u);  // the long prompt alone, its chunks as a lone prompt's
    const SequenceState* long_state = steps[0][0].state;
    EXPECT_EQ(steps[0][0].tokens, options.prefill_chunk * options.max_prompt_chunks_per_step);
    ASSERT_EQ(steps[1].size(), 2u);
    EXPECT_EQ(steps[1][0].state, long_state);
    EXPECT_EQ(steps[1][1].begin, 0);  // the newcomer's first chunk
  }
}

TEST_F(EngineStepBudget, RefusesNoPromptChunksAStep) {
  EXPECT_THROW(Engine(*model_, nullptr, chunks_per_step_options(0)), Error);
}

}  // namespace
}  // namespace vt
