// MTP speculation in the serving engine on the CUDA model (issue 10, GPU side): target sequences
// keep their final-norm hidden states on the device (BatchItem keep_hidden, a ring of one step's
// rows per slot) and the head reads them (mtp_forward_from_sequence), as the CPU reference does:
// the kept positions and the head's logits follow the CPU model's through batched steps, ring
// wraps, verify rollbacks, a gap and a graph-replayed decode step, and a step that would keep more
// than the ring holds is refused before it changes anything. The engine on the golden dense model
// with an MTP head fitted to its greedy continuations (tests/speculative/mtp_test_support.h): greedy
// outputs equal plain decoding's for k = 1..8 alone (accepting the drafts the CPU engine accepts)
// and for 16 mixed requests at once (each as alone), through preemption and cancellation, and with
// prompts far longer than a step (chunked prefill, the head catching up chunk by chunk). f32
// activations: the verify steps' and batched steps' sums differ from plain decoding's only in the
// last bits (tests/cuda/test_cuda_spec.cpp), which leaves the golden models' greedy tokens alone.
// Skips without a GPU unless VT_REQUIRE_GPU is set.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../numerics.h"
#include "../speculative/mtp_test_support.h"
#include "cuda_test_support.h"
#include "engine_test_support.h"
#include "engine/engine.h"
#include "models/qwen3_5/model.h"
#include "runtime/qwen3_5_cuda.h"
#include "speculative/mtp_drafter.h"

namespace vt {
namespace {

using testing::golden_prompt;
using testing::MtpCheckpoint;
using testing::relative_l2;
using testing::run_all;
using testing::Outcome;

const std::string kName = "qwen3_5_dense";
constexpr int64_t kMaxDrafts = 8;

// The golden dense model with an MTP head fitted to its greedy continuations of the two golden
// prompts (7 and 150 tokens; their drafts are accepted), as a CUDA model and a CPU reference.
class CudaEngineMtp : public testing::GpuTest {
 protected:
  static void SetUpTestSuite() {
    fitted_prompts_ = new std::vector<std::vector<int32_t>>{golden_prompt(kName, 0), golden_prompt(kName, 1)};
    checkpoint_ = new MtpCheckpoint(kName, testing::fitted_mtp_tensors(kName, *fitted_prompts_, 24, 19));
    Qwen35LoadOptions load;
    load.load_mtp = true;
    cpu_ = new Qwen35Model(checkpoint_->dir(), load);
  }
  static void TearDownTestSuite() {
    delete cpu_;
    delete checkpoint_;
    delete fitted_prompts_;
  }
  // f32, one slot per running request, steps of `step_tokens`, verifies of up to kMaxDrafts drafts;
  // a pool of `cache_blocks` blocks of `block_size` tokens (0: room for every slot's longest).
  static std::unique_ptr<Qwen35CudaModel> load_cuda(int64_t sequences, int64_t step_tokens, int64_t cache_blocks = 0,
                                                    int64_t block_size = 32) {
    CudaModelOptions options;
    options.activations = DType::kF32;
    options.cache_blocks = cache_blocks;
    options.block_size = block_size;
    options.max_sequences = sequences;
    options.max_context = 256;  // the 150-token prompt, 24 generated and a verify's drafts
    options.max_step_tokens = step_tokens;
    options.max_logit_rows = sequences * (kMaxDrafts + 1);
    options.max_rollback_tokens = kMaxDrafts + 1;
    options.load_mtp = true;
    return load_qwen35_cuda(checkpoint_->dir(), options);
  }
  // As `vt serve --speculative mtp`: an MtpDrafter per request on the target's sequences, drafts
  // sampled like the request. The model's slots and step match the engine's.
  static EngineOptions mtp_options(MtpHead& head, int64_t running, int64_t budget) {
    EngineOptions options;
    options.max_running = running;
    options.step_token_budget = budget;
    options.prefill_chunk = 8;
    options.cache_blocks = 256;
    options.max_num_draft = kMaxDrafts;
    options.make_drafter = [&head](const RequestParams& request) {
      SamplingParams draft_sampling = request.sampling;
      draft_sampling.seed = request.sampling.seed + 1;
      return std::make_unique<MtpDrafter>(head, draft_sampling, MtpHiddenSource::kSequence);
    };
    return options;
  }
  // The same engine without speculation.
  static EngineOptions plain_options(EngineOptions options) {
    options.max_num_draft = 0;
    options.make_drafter = nullptr;
    return options;
  }
  // A prompt cut from the long golden prompt (not fitted: its drafts are mostly rejected).
  static std::vector<int32_t> cut_prompt(int64_t begin, int64_t length) {
    const auto& source = (*fitted_prompts_)[1];
    return {source.begin() + begin, source.begin() + begin + length};
  }
  static std::vector<std::vector<int32_t>>* fitted_prompts_;
  static MtpCheckpoint* checkpoint_;
  static Qwen35Model* cpu_;
};
std::vector<std::vector<int32_t>>* CudaEngineMtp::fitted_prompts_ = nullptr;
MtpCheckpoint* CudaEngineMtp::checkpoint_ = nullptr;
Qwen35Model* CudaEngineMtp::cpu_ = nullptr;

// ---- The model's calls: hidden states kept per target sequence, read by the head ----

// One target sequence on both models, its head sequences (the CPU head also on the CUDA model's
// kept rows: the head's numerics apart from the target's), and the tokens it runs.
struct Lane {
  std::vector<int32_t> source;
  std::unique_ptr<SequenceState> cpu_target, cuda_target, cpu_head, cuda_head, isolated;
  int64_t length = 0;
};

// Batched steps with keep_hidden items on both models, the CUDA ring 16 rows (max_step_tokens):
// after each call the CUDA sequences keep the CPU's positions, and each read of them gives the CPU
// head's logits (on the CPU target's states and on the CUDA model's own), f32 within kLogitsRelL2.
TEST_F(CudaEngineMtp, SequenceHiddenStatesFollowTheCpu) {
  MtpCheckpoint checkpoint(kName, testing::random_mtp_tensors(testing::golden_config(kName), 7));
  Qwen35LoadOptions load;
  load.load_mtp = true;
  Qwen35Model cpu(checkpoint.dir(), load);
  CudaModelOptions options;
  options.activations = DType::kF32;
  options.max_sequences = 2;
  options.max_context = 128;
  options.max_step_tokens = 16;
  options.max_logit_rows = 8;
  options.max_rollback_tokens = 5;
  options.load_mtp = true;
  auto cuda = load_qwen35_cuda(checkpoint.dir(), options);
  ASSERT_TRUE(cuda->keeps_sequence_hidden_states());
  const int64_t V = cuda->info().vocab_size, H = cuda->config().hidden_size;
  const std::vector<int32_t> ids = golden_prompt(kName, 1);
  Lane lanes[2];
  for (int l = 0; l < 2; ++l) {
    Lane& lane = lanes[l];
    lane.source.assign(ids.begin() + 50 * l, ids.begin() + 50 * l + 64);
    lane.cpu_target = cpu.new_sequence(64);
    lane.cuda_target = cuda->new_sequence(64);
    lane.cpu_head = cpu.new_mtp_sequence(64);
    lane.isolated = cpu.new_mtp_sequence(64);
    lane.cuda_head = cuda->new_mtp_sequence(64);
  }
  Lane &a = lanes[0], &b = lanes[1];
  const auto expect_positions = [&](const std::string& what) {
    for (int l = 0; l < 2; ++l) {
      const PositionRange want = cpu.sequence_hidden_positions(*lanes[l].cpu_target);
      const PositionRange got = cuda->sequence_hidden_positions(*lanes[l].cuda_target);
      EXPECT_EQ(got.start, want.start) << what << ", lane " << l;
      EXPECT_EQ(got.count, want.count) << what << ", lane " << l;
    }
  };
  struct Part {
    Lane* lane;
    int64_t tokens;
    bool keep, verify;
  };
  // One batched step of `parts` on both models (a verify: a window and a row per token).
  const auto step = [&](const std::vector<Part>& parts, const std::string& what) {
    std::vector<BatchItem> cpu_items, cuda_items;
    for (const Part& part : parts) {
      const std::span<const int32_t> tokens(part.lane->source.data() + part.lane->length, size_t(part.tokens));
      cpu_items.push_back({tokens, part.lane->cpu_target.get(), part.verify, part.verify, part.keep});
      cuda_items.push_back({tokens, part.lane->cuda_target.get(), part.verify, part.verify, part.keep});
    }
    Buffer logits(DType::kF32, {batch_logit_rows(cpu_items), V});
    cpu.forward_batch(cpu_items, logits);
    cuda->forward_batch(cuda_items, logits);
    for (const Part& part : parts) part.lane->length += part.tokens;
    expect_positions(what);
  };
  double worst = 0;
  // The head reads `count` pairs from `first`: hidden at p with the token at p + 1.
  const auto read = [&](Lane& lane, int64_t first, int64_t count, const std::string& what) {
    const PositionRange kept = cuda->sequence_hidden_positions(*lane.cuda_target);
    ASSERT_TRUE(kept.contains(first, count)) << what;
    const std::vector<float> rows = cuda->sequence_hidden_states(*lane.cuda_target);
    ASSERT_EQ(int64_t(rows.size()), kept.count * H) << what;
    const std::span<const int32_t> tokens(lane.source.data() + first + 1, size_t(count));
    Buffer cpu_logits(DType::kF32, {1, V}), cuda_logits(DType::kF32, {1, V}), isolated_logits(DType::kF32, {1, V});
    cpu.mtp_forward_from_sequence(tokens, first, *lane.cpu_target, *lane.cpu_head, cpu_logits);
    cuda->mtp_forward_from_sequence(tokens, first, *lane.cuda_target, *lane.cuda_head, cuda_logits);
    std::vector<float> own(rows.begin() + (first - kept.start) * H, rows.begin() + (first - kept.start + count) * H);
    Buffer hidden_out(DType::kF32, {count, H});
    cpu.mtp_forward(tokens, TensorView{own.data(), DType::kF32, Device::kCpu, {count, H}}, *lane.isolated, hidden_out,
                    isolated_logits);
    const std::vector<float> got(cuda_logits.f32(), cuda_logits.f32() + V);
    const double end_to_end = relative_l2(got, {cpu_logits.f32(), cpu_logits.f32() + V});
    const double isolated = relative_l2(got, {isolated_logits.f32(), isolated_logits.f32() + V});
    EXPECT_LE(end_to_end, numerics::kLogitsRelL2) << what << ": vs the CPU target and head";
    EXPECT_LE(isolated, numerics::kLogitsRelL2) << what << ": vs the CPU head on the same rows";
    worst = std::max({worst, end_to_end, isolated});
    expect_positions(what);
  };

  step({{&a, 10, true, false}, {&b, 6, true, false}}, "prefill chunks");
  read(a, 0, 9, "a reads all it can");  // a keeps position 9's, which pairs with a token to come
  // At most 16 tokens a step (max_step_tokens, also the ring's rows).
  step({{&a, 12, true, false}, {&b, 4, true, false}}, "second chunks");  // a's 9..21 wrap the ring
  read(a, 9, 6, "a reads part of what it keeps");
  read(b, 0, 9, "b reads its two chunks");
  step({{&a, 4, true, true}, {&b, 1, true, false}}, "a verifies three drafts beside b's decode");
  cpu.rollback(*a.cpu_target, 24);
  cpu.commit(*a.cpu_target);
  cuda->rollback(*a.cuda_target, 24);
  cuda->commit(*a.cuda_target);
  a.length = 24;
  expect_positions("a rolled back to one accepted draft");
  read(a, 15, 8, "a reads across the ring's end");
  step({{&a, 1, true, false}, {&b, 1, true, false}}, "an all-decode step (a CUDA graph)");
  read(b, 9, 2, "b reads its decode steps");
  step({{&a, 2, false, false}}, "a runs without keeping");
  expect_positions("a keeps what it had");
  // A gap: forward (one sequence) with keep_hidden keeps only its own.
  ForwardOptions keep;
  keep.keep_hidden = true;
  Buffer row(DType::kF32, {1, V});
  const std::span<const int32_t> after_gap(a.source.data() + a.length, 4);
  cpu.forward(after_gap, *a.cpu_target, row, keep);
  cuda->forward(after_gap, *a.cuda_target, row, keep);
  a.length += 4;
  expect_positions("after a gap");
  EXPECT_EQ(cuda->sequence_hidden_positions(*a.cuda_target).start, a.length - 4);
  // 4 unread and 13 more pass the 16 rows: refused before either sequence changes.
  {
    std::vector<BatchItem> items = {{std::span<const int32_t>(a.source.data() + a.length, 13), a.cuda_target.get()},
                                    {std::span<const int32_t>(b.source.data() + b.length, 1), b.cuda_target.get()}};
    items[0].keep_hidden = items[1].keep_hidden = true;
    Buffer logits(DType::kF32, {2, V});
    try {
      cuda->forward_batch(items, logits);
      ADD_FAILURE() << "a step keeping 17 unread rows in a ring of 16";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("exceed the 16 rows a sequence holds"), std::string::npos) << error.what();
    }
    EXPECT_EQ(a.cuda_target->length(), a.length);
    EXPECT_EQ(b.cuda_target->length(), b.length);
    expect_positions("after the refused step");
  }
  read(a, a.length - 4, 3, "a reads after the gap");
  EXPECT_THROW(cuda->mtp_forward_from_sequence(std::span<const int32_t>(a.source.data() + 2, 1), 1, *a.cuda_target,
                                               *a.cuda_head, row),
               Error);  // position 1's state was read long ago
  std::printf("kept per sequence: head logits vs the CPU's within %.3g (bound %.3g)\n", worst, numerics::kLogitsRelL2);
}

// ---- The serving engine ----

// One request at a time, k = 1..8, prompts fed in chunks of 8 or 3, or (k = 2, 6) three chunks of
// 8 a step, as vt serve packs a lone prompt (the ring then keeps a whole 24-token step): the ids
// are plain greedy decoding's (the engine's without speculation); on the fitted prompts the drafts
// are accepted, as many as the CPU engine accepts for the same request, chained ones too.
TEST_F(CudaEngineMtp, GreedyAloneIdenticalToPlainForEveryK) {
  auto cuda = load_cuda(1, 24);
  std::vector<std::vector<int32_t>> prompts = *fitted_prompts_;
  prompts.push_back(cut_prompt(30, 20));
  for (size_t p = 0; p < prompts.size(); ++p) {
    const bool fitted = p < fitted_prompts_->size();
    RequestParams plain;
    plain.max_tokens = 24;
    const EngineOptions base = mtp_options(*cuda, 1, 24);
    const std::vector<int32_t> want = run_all(*cuda, plain_options(base), {prompts[p]}, {plain})[0].ids;
    ASSERT_EQ(int64_t(want.size()), plain.max_tokens);
    for (int64_t k = 1; k <= kMaxDrafts; ++k) {
      SCOPED_TRACE("prompt " + std::to_string(p) + " k " + std::to_string(k));
      EngineOptions options = base;
      if (k % 2 == 1) options.prefill_chunk = 3;
      if (k % 4 == 2) options.max_prompt_chunks_per_step = 3;
      RequestParams params = plain;
      params.num_draft = k;
      EngineStats stats;
      const Outcome got = run_all(*cuda, options, {prompts[p]}, {params}, &stats)[0];
      EXPECT_EQ(got.last.error, "");
      EXPECT_EQ(got.ids, want);
      const SpeculativeStats& spec = stats.speculative;
      EXPECT_EQ(spec.emitted, plain.max_tokens - 1);
      EXPECT_GT(spec.drafted, 0);
      if (fitted) {
        EngineOptions on_cpu = mtp_options(*cpu_, 1, 24);
        on_cpu.prefill_chunk = options.prefill_chunk;
        on_cpu.max_prompt_chunks_per_step = options.max_prompt_chunks_per_step;
        EngineStats cpu_stats;
        EXPECT_EQ(run_all(*cpu_, on_cpu, {prompts[p]}, {params}, &cpu_stats)[0].ids, want);
        EXPECT_GT(spec.accepted, 0);
        EXPECT_EQ(spec.accepted, cpu_stats.speculative.accepted) << "the CPU engine's drafts were accepted otherwise";
        if (k > 1) {
          EXPECT_GT(spec.accepted_at[1], 0) << "no chained draft accepted";
        }
      }
      std::printf("cuda mtp engine prompt %zu k %lld: %lld of %lld drafts accepted in %lld steps\n", p, (long long)k,
                  (long long)spec.accepted, (long long)spec.drafted, (long long)spec.steps);
    }
  }
}

// 16 requests at once on a tight budget (a verify of up to 9 tokens in 24-token steps): MTP ones
// with k = 1..8 (some adaptive, some with logprobs) beside plain ones, on the fitted prompts and
// cut ones. Every request gives what it gives alone, which is plain greedy decoding's.
TEST_F(CudaEngineMtp, SixteenMixedRequestsEqualRunningAlone) {
  constexpr int kRequests = 16;
  auto cuda = load_cuda(kRequests, 24);
  const EngineOptions options = mtp_options(*cuda, kRequests, 24);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(kRequests);
  int64_t speculating = 0;
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(i % 4 < 2 ? (*fitted_prompts_)[size_t(i % 2)] : cut_prompt(i, 3 + i));
    params[i].max_tokens = 6 + (i * 7) % 19;
    if (i % 4 != 3) params[i].num_draft = 1 + speculating++ % kMaxDrafts;  // 1..8, then 1..4
    params[i].adaptive_draft = i % 5 == 0;
    if (i % 5 == 1) params[i].logprobs = 2;
  }
  EngineStats stats;
  const auto together = run_all(*cuda, options, prompts, params, &stats);
  // Plain greedy decoding of each prompt, 24 tokens: every shorter request's are a prefix of them.
  std::map<std::vector<int32_t>, std::vector<int32_t>> plain;
  for (const auto& prompt : prompts) {
    if (plain.count(prompt)) continue;
    RequestParams longest;
    longest.max_tokens = 24;
    plain[prompt] = run_all(*cuda, plain_options(options), {prompt}, {longest})[0].ids;
  }
  int64_t max_draft = 0;
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + " k " + std::to_string(params[i].num_draft));
    EXPECT_EQ(together[i].last.error, "");
    ASSERT_EQ(int64_t(together[i].ids.size()), params[i].max_tokens);
    EXPECT_EQ(together[i].ids, run_all(*cuda, options, {prompts[i]}, {params[i]})[0].ids);
    const std::vector<int32_t>& want = plain[prompts[i]];
    EXPECT_EQ(together[i].ids, std::vector<int32_t>(want.begin(), want.begin() + params[i].max_tokens));
    max_draft = std::max(max_draft, params[i].num_draft);
  }
  EXPECT_EQ(max_draft, kMaxDrafts);
  EXPECT_EQ(stats.running + stats.waiting + stats.cache.blocks_used + stats.cache.slots_used, 0);
  EXPECT_GT(stats.speculative.accepted, 0);
  EXPECT_GT(stats.speculative.drafted_at[kMaxDrafts - 1], 0) << "no verify of 8 drafts";
  std::printf("16 mixed: %lld of %lld drafts accepted in %lld verify steps\n", (long long)stats.speculative.accepted,
              (long long)stats.speculative.drafted, (long long)stats.speculative.steps);
}

// A device pool far too small (12 blocks of 8 tokens, 8 running): MTP requests are preempted and
// re-fed (a new target sequence keeps nothing the head has read; its head sequence stays with the
// drafter) and each gives what it gives alone, plain greedy's. Then, on a roomy pool, one
// cancelled mid-way leaves nothing behind, and its head's slot serves the next request.
TEST_F(CudaEngineMtp, PreemptionAndCancellation) {
  constexpr int64_t kRunning = 8;
  auto tiny = load_cuda(kRunning, 24, 12, 8);
  EngineOptions options = mtp_options(*tiny, kRunning, 24);
  constexpr int kRequests = 10;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(i % 3 == 0 ? (*fitted_prompts_)[0] : cut_prompt(5 * i, 4 + (i * 7) % 20));
    params[i].max_tokens = 20 + i % 5;
    params[i].num_draft = i % 4 == 3 ? 0 : 2 + i % 5;
  }
  EngineStats stats;
  const auto together = run_all(*tiny, options, prompts, params, &stats);
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.recomputed_tokens, 0);
  EXPECT_EQ(stats.requests_finished, kRequests);
  EXPECT_EQ(stats.running + stats.waiting + stats.cache.blocks_used + stats.cache.slots_used, 0);
  EXPECT_GT(stats.speculative.accepted, 0);
  EngineOptions alone = options;
  alone.reservation = EngineOptions::Reservation::kFull;  // one request at a time holds its whole need
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(together[i].last.error, "");
    EXPECT_EQ(together[i].ids, run_all(*tiny, alone, {prompts[i]}, {params[i]})[0].ids);
    RequestParams plain = params[i];
    plain.num_draft = 0;
    EXPECT_EQ(together[i].ids, run_all(*tiny, plain_options(alone), {prompts[i]}, {plain})[0].ids);
  }
  std::printf("tiny pool: %lld preemptions, %lld tokens re-fed, %lld of %lld drafts accepted\n",
              (long long)stats.preemptions, (long long)stats.recomputed_tokens, (long long)stats.speculative.accepted,
              (long long)stats.speculative.drafted);

  tiny.reset();
  auto cuda = load_cuda(kRunning, 24);
  RequestParams long_request;
  long_request.max_tokens = 200;
  long_request.num_draft = 4;
  RequestParams short_request = long_request;
  short_request.max_tokens = 12;
  const EngineOptions roomy = mtp_options(*cuda, kRunning, 24);  // the long fitted prompt fits
  std::vector<std::vector<int32_t>> want;
  for (const auto& prompt : *fitted_prompts_) {
    RequestParams plain = short_request;
    plain.num_draft = 0;
    want.push_back(run_all(*cuda, plain_options(roomy), {prompt}, {plain})[0].ids);
  }
  // Declared before the engine, so they outlive its thread (its destructor joins it).
  std::promise<void> first_token;
  std::atomic<bool> signalled{false};
  std::mutex mutex;
  std::condition_variable done;
  std::vector<int32_t> other_ids, next_ids;
  FinishReason cancelled_reason = FinishReason::kNone;
  int finished = 0;
  const auto collect = [&](std::vector<int32_t>* ids) {
    return [&, ids](const TokenEvent& event) {
      std::lock_guard<std::mutex> lock(mutex);
      if (event.token_id >= 0 && ids) ids->push_back(event.token_id);
      if (event.finished) {
        EXPECT_EQ(event.error, "");
        if (!ids) cancelled_reason = event.finish_reason;
        ++finished;
        done.notify_all();
      }
    };
  };
  auto cancelled_callback = collect(nullptr);
  Engine engine(*cuda, nullptr, roomy);
  const int64_t id = engine.submit((*fitted_prompts_)[0], long_request, [&](const TokenEvent& event) {
    cancelled_callback(event);
    if (!signalled.exchange(true)) first_token.set_value();
  });
  engine.submit((*fitted_prompts_)[1], short_request, collect(&other_ids));
  first_token.get_future().wait();
  engine.cancel(id);
  {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(done.wait_for(lock, std::chrono::seconds(300), [&] { return finished == 2; }));
  }
  EXPECT_EQ(cancelled_reason, FinishReason::kCancelled);
  EXPECT_EQ(other_ids, want[1]);
  const EngineStats after = engine.stats();
  EXPECT_EQ(after.running + after.cache.blocks_used + after.cache.slots_used, 0);
  EXPECT_EQ(after.requests_cancelled, 1);
  // Every target and head slot but the ones it needs are free again: a request at each runs.
  engine.submit((*fitted_prompts_)[0], short_request, collect(&next_ids));
  {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(done.wait_for(lock, std::chrono::seconds(300), [&] { return finished == 3; }));
  }
  EXPECT_EQ(next_ids, want[0]);
}

// Prompts far longer than a step (150, 120 and 90 tokens in steps of 16: prefill chunks of 8
// beside verifies of up to 8 tokens; the ring of kept hidden states 16 rows): the head catches up
// after every chunk, so no step is refused; outputs are plain greedy's; the fitted prompt's drafts
// are accepted as on the CPU.
TEST_F(CudaEngineMtp, PromptsLongerThanTheStepBudget) {
  auto cuda = load_cuda(3, 16);
  const EngineOptions options = mtp_options(*cuda, 3, 16);
  const std::vector<std::vector<int32_t>> prompts = {(*fitted_prompts_)[1], cut_prompt(10, 120), cut_prompt(55, 90)};
  std::vector<RequestParams> params(prompts.size());
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].max_tokens = 24;
    params[i].num_draft = 3 + int64_t(i) * 2;  // 3, 5, 7
  }
  EngineStats stats;
  const auto together = run_all(*cuda, options, prompts, params, &stats);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(together[i].last.error, "");
    RequestParams plain = params[i];
    plain.num_draft = 0;
    EXPECT_EQ(together[i].ids, run_all(*cuda, plain_options(options), {prompts[i]}, {plain})[0].ids);
  }
  EngineStats alone, cpu_alone;
  EXPECT_EQ(run_all(*cuda, options, {prompts[0]}, {params[0]}, &alone)[0].ids, together[0].ids);
  run_all(*cpu_, mtp_options(*cpu_, 3, 16), {prompts[0]}, {params[0]}, &cpu_alone);
  EXPECT_GT(alone.speculative.accepted, 0);
  EXPECT_EQ(alone.speculative.accepted, cpu_alone.speculative.accepted);
  EXPECT_GT(stats.speculative.accepted, 0);
  std::printf("long prompts: %lld of %lld drafts accepted (the fitted one alone: %lld, on the CPU %lld)\n",
              (long long)stats.speculative.accepted, (long long)stats.speculative.drafted,
              (long long)alone.speculative.accepted, (long long)cpu_alone.speculative.accepted);
}

}  // namespace
}  // namespace vt
