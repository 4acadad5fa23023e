// The MTP drafter on golden tiny models given random `mtp.*` weights (written at test time): its
// first proposals equal a re-computation of the head from its definition written here; greedy
// speculative output equals plain greedy output for k = 1..4 (an FP8 head too); a head fitted to
// the target's greedy path has its drafts accepted; its state after any accepted prefix equals a
// fresh drafter's; catching up on a target sequence's kept hidden states after every prompt chunk
// (the serving engine) proposes as reading them all at once; loading is strict. No HF reference
// exists (transformers does not implement the MTP head); the definition followed is vLLM's
// qwen3_next_mtp / qwen3_5_mtp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../numerics.h"
#include "io/json_config.h"
#include "io/weight_store.h"
#include "model/generate.h"
#include "models/qwen3_5/model.h"
#include "mtp_test_support.h"
#include "speculative/mtp_drafter.h"
#include "speculative/speculative.h"

namespace vt {
namespace {

using testing::golden_config;
using testing::golden_prompt;
using testing::MtpCheckpoint;
using testing::random_mtp_tensors;
using testing::Tensors;

std::unique_ptr<Qwen35Model> load_with_mtp(const std::string& dir) {
  Qwen35LoadOptions options;
  options.load_mtp = true;
  return std::make_unique<Qwen35Model>(dir, options);
}

template <typename Body>
void expect_error(Body body, const std::string& fragment) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

// ---- The MTP head from its definition, written independently of the model code -------------

struct Reference {
  const Qwen35Config& c;
  const Tensors& mtp;
  std::vector<float> embed, lm_head;  // [V, H] f32

  const std::vector<float>& w(const std::string& name) const {
    return mtp.at("mtp." + name).second;
  }
  // y = W x, W [rows, cols] row-major.
  std::vector<float> matvec(const std::vector<float>& W, const float* x, int64_t rows,
                            int64_t cols) const {
    std::vector<float> y(size_t(rows), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t k = 0; k < cols; ++k) sum += double(W[r * cols + k]) * x[k];
      y[r] = float(sum);
    }
    return y;
  }
  // Zero-centred RMSNorm: x / rms(x) * (1 + w).
  std::vector<float> norm(const float* x, const std::vector<float>& weight) const {
    const int64_t n = int64_t(weight.size());
    double squares = 0;
    for (int64_t i = 0; i < n; ++i) squares += double(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(squares / n + c.rms_norm_eps);
    std::vector<float> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) y[i] = float(x[i] * inv * (1.0 + weight[i]));
    return y;
  }
  // NeoX rotation of the first rotary_dim dims of one head at `position`.
  void rope(float* head, int64_t position) const {
    const int64_t half = c.rotary_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = position * std::pow(double(c.rope.theta), -2.0 * i / c.rotary_dim);
      const double x1 = head[i], x2 = head[i + half];
      head[i] = float(x1 * std::cos(angle) - x2 * std::sin(angle));
      head[i + half] = float(x2 * std::cos(angle) + x1 * std::sin(angle));
    }
  }
  static float silu(float x) { return x / (1.0f + std::exp(-x)); }
  std::vector<float> swiglu(const std::string& p, const std::vector<float>& x,
                            int64_t inter) const {
    const int64_t H = c.hidden_size;
    auto gate = matvec(w(p + "gate_proj.weight"), x.data(), inter, H);
    auto up = matvec(w(p + "up_proj.weight"), x.data(), inter, H);
    for (int64_t i = 0; i < inter; ++i) gate[i] = silu(gate[i]) * up[i];
    return matvec(w(p + "down_proj.weight"), gate.data(), H, inter);
  }
  std::vector<float> ffn(const std::vector<float>& x) const {
    if (!c.layer_is_moe(0)) return swiglu("layers.0.mlp.", x, c.intermediate_size);
    const int64_t H = c.hidden_size, E = c.num_experts;
    auto router = matvec(w("layers.0.mlp.gate.weight"), x.data(), E, H);
    const float top = *std::max_element(router.begin(), router.end());
    std::vector<double> probs(static_cast<size_t>(E));
    double total = 0;
    for (int64_t e = 0; e < E; ++e) total += probs[e] = std::exp(double(router[e]) - top);
    std::vector<int64_t> order(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t l, int64_t r) { return probs[l] > probs[r]; });
    double chosen = 0;
    for (int64_t j = 0; j < c.num_experts_per_tok; ++j) chosen += probs[order[j]];
    std::vector<float> out(size_t(H), 0.0f);
    for (int64_t j = 0; j < c.num_experts_per_tok; ++j) {
      const int64_t e = order[j];
      const double weight = c.norm_topk_prob ? probs[e] / chosen : probs[e] / total;
      auto y =
          swiglu("layers.0.mlp.experts." + std::to_string(e) + ".", x, c.moe_intermediate_size);
      for (int64_t i = 0; i < H; ++i) out[i] += float(weight * y[i]);
    }
    auto shared = swiglu("layers.0.mlp.shared_expert.", x, c.shared_expert_intermediate_size);
    const float gate = matvec(w("layers.0.mlp.shared_expert_gate.weight"), x.data(), 1, H)[0];
    for (int64_t i = 0; i < H; ++i) out[i] += shared[i] / (1.0f + std::exp(-gate));
    return out;
  }

  // Runs pairs (hidden[t], tokens[t]) at positions 0..T-1; returns each row's lm_head input.
  std::vector<std::vector<float>> run(const std::vector<std::vector<float>>& hidden,
                                      const std::vector<int32_t>& tokens) const {
    const int64_t T = int64_t(tokens.size()), H = c.hidden_size, D = c.head_dim;
    const int64_t hq = c.num_heads, hkv = c.num_kv_heads;
    std::vector<std::vector<float>> x(T), q(T), gate(T), k(T), v(T), out(T);
    for (int64_t t = 0; t < T; ++t) {
      auto e = norm(embed.data() + tokens[t] * H, w("pre_fc_norm_embedding.weight"));
      auto h = norm(hidden[t].data(), w("pre_fc_norm_hidden.weight"));
      e.insert(e.end(), h.begin(), h.end());  // [embedding | hidden]
      x[t] = matvec(w("fc.weight"), e.data(), H, 2 * H);
      auto normed = norm(x[t].data(), w("layers.0.input_layernorm.weight"));
      auto qg = matvec(w("layers.0.self_attn.q_proj.weight"), normed.data(), hq * 2 * D, H);
      k[t] = matvec(w("layers.0.self_attn.k_proj.weight"), normed.data(), hkv * D, H);
      v[t] = matvec(w("layers.0.self_attn.v_proj.weight"), normed.data(), hkv * D, H);
      for (int64_t head = 0; head < hq; ++head) {  // per head [q | gate]
        auto qn = norm(qg.data() + head * 2 * D, w("layers.0.self_attn.q_norm.weight"));
        rope(qn.data(), t);
        q[t].insert(q[t].end(), qn.begin(), qn.end());
        gate[t].insert(gate[t].end(), qg.begin() + head * 2 * D + D,
                       qg.begin() + (head + 1) * 2 * D);
      }
      for (int64_t head = 0; head < hkv; ++head) {
        auto kn = norm(k[t].data() + head * D, w("layers.0.self_attn.k_norm.weight"));
        rope(kn.data(), t);
        std::copy(kn.begin(), kn.end(), k[t].begin() + head * D);
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> attended(size_t(hq * D), 0.0f);
      for (int64_t head = 0; head < hq; ++head) {
        const int64_t kv_head = head / (hq / hkv);
        std::vector<double> scores(static_cast<size_t>(t + 1));
        double top = -1e300, total = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t i = 0; i < D; ++i) dot += double(q[t][head * D + i]) * k[s][kv_head * D + i];
          top = std::max(top, scores[s] = dot / std::sqrt(double(D)));
        }
        for (double& score : scores) total += score = std::exp(score - top);
        for (int64_t i = 0; i < D; ++i) {
          double sum = 0;
          for (int64_t s = 0; s <= t; ++s) sum += scores[s] / total * v[s][kv_head * D + i];
          const float g = gate[t][head * D + i];
          attended[head * D + i] = float(sum) / (1.0f + std::exp(-g));
        }
      }
      auto branch = matvec(w("layers.0.self_attn.o_proj.weight"), attended.data(), H, hq * D);
      for (int64_t i = 0; i < H; ++i) x[t][i] += branch[i];
      auto ffn_out = ffn(norm(x[t].data(), w("layers.0.post_attention_layernorm.weight")));
      for (int64_t i = 0; i < H; ++i) x[t][i] += ffn_out[i];
      out[t] = norm(x[t].data(), w("norm.weight"));
    }
    return out;
  }
  std::vector<float> logits(const std::vector<float>& hidden) const {
    return matvec(lm_head, hidden.data(), c.vocab_size, c.hidden_size);
  }
};

double relative_l2(const float* a, const float* b, int64_t count) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < count; ++i)
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), norm += double(b[i]) * b[i];
  return std::sqrt(diff / norm);
}

const char* const kCases[] = {"qwen3_5_dense", "qwen3_5_moe"};  // dense MLP; MoE + VL layout

// The drafter's first three proposals after a prefill, and the head's hidden states and logits,
// equal the definition run here on the target's kept hidden states (which are the lm_head's
// inputs).
TEST(MtpDrafter, ProposalsEqualTheHeadsDefinition) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const Qwen35Config config = golden_config(name);
    const Tensors mtp = random_mtp_tensors(config, 7);
    MtpCheckpoint checkpoint(name, mtp);
    auto model = load_with_mtp(checkpoint.dir());
    const int64_t V = config.vocab_size, H = config.hidden_size;
    WeightStore store = WeightStore::open(checkpoint.dir());
    Reference reference{config, mtp, {}, {}};
    Buffer embed = load_f32(store, config.weight_prefix + "embed_tokens.weight", {V, H});
    Buffer lm_head = load_f32(store, "lm_head.weight", {V, H});
    reference.embed.assign(embed.f32(), embed.f32() + V * H);
    reference.lm_head.assign(lm_head.f32(), lm_head.f32() + V * H);

    const std::vector<int32_t> full = golden_prompt(name, 1);
    const std::vector<int32_t> prompt(full.begin(), full.begin() + 12);
    const int64_t P = int64_t(prompt.size());
    MtpDrafter drafter(*model, {});
    auto state = model->new_sequence(64);
    Buffer logits(DType::kF32, {P, V});
    ForwardOptions all;
    all.all_logits = true;
    model->forward(prompt, *state, logits, all);
    drafter.start(prompt, 64);

    // The kept rows are the lm_head inputs: lm_head(row) gives the logits of every position.
    const TensorView kept = model->last_hidden_states();
    ASSERT_EQ(kept.shape, Shape({P, H}));
    EXPECT_EQ(model->last_hidden_states_start(), 0);
    double worst_logits = 0;
    std::vector<std::vector<float>> hidden;
    for (int64_t t = 0; t < P; ++t) {
      hidden.emplace_back(kept.f32() + t * H, kept.f32() + (t + 1) * H);
      auto want = reference.logits(hidden.back());
      worst_logits = std::max(worst_logits, relative_l2(logits.f32() + t * V, want.data(), V));
    }
    EXPECT_LE(worst_logits, numerics::kSamePathRelL2);

    std::vector<int32_t> context = prompt;
    context.push_back(argmax(logits.f32() + (P - 1) * V, V));
    Draft draft;
    drafter.propose(context, 3, draft);
    ASSERT_EQ(draft.tokens.size(), 3u);
    EXPECT_TRUE(draft.probs.empty());

    // Pairs (hidden at t, token at t + 1) for t < P, then chained steps (own output, last draft).
    std::vector<int32_t> tokens(context.begin() + 1, context.end());
    const auto out = reference.run(hidden, tokens);
    const auto first = reference.logits(out.back());
    for (size_t i = 0; i < draft.tokens.size(); ++i) {
      const auto chained = i == 0 ? out : reference.run(hidden, tokens);
      const auto want = reference.logits(chained.back());
      EXPECT_EQ(draft.tokens[i], argmax(want.data(), V)) << "draft " << i;
      hidden.push_back(chained.back());
      tokens.push_back(draft.tokens[i]);
    }

    // The head's own numbers on the same pairs, through the model's MTP API.
    auto mtp_state = model->new_mtp_sequence(64);
    Buffer hidden_out(DType::kF32, {P, H}), head_logits(DType::kF32, {1, V});
    model->mtp_forward(std::span<const int32_t>(context).subspan(1), kept.rows(0, P), *mtp_state,
                       hidden_out, head_logits);
    double worst_hidden = 0;
    for (int64_t t = 0; t < P; ++t)
      worst_hidden =
          std::max(worst_hidden, relative_l2(hidden_out.f32() + t * H, out[t].data(), H));
    const double logits_error = relative_l2(head_logits.f32(), first.data(), V);
    EXPECT_LE(worst_hidden, numerics::kSamePathRelL2);
    EXPECT_LE(logits_error, numerics::kSamePathRelL2);
    std::printf(
        "%s: MTP head vs its definition: hidden rel L2 %.3g, logits %.3g; drafts %d %d %d\n", name,
        worst_hidden, logits_error, draft.tokens[0], draft.tokens[1], draft.tokens[2]);
  }
}

// Greedy speculative output with the MTP drafter is plain greedy output, k = 1..4.
TEST(MtpDrafter, GreedySpeculativeEqualsPlainGreedy) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    MtpCheckpoint checkpoint(name, random_mtp_tensors(golden_config(name), 11));
    auto model = load_with_mtp(checkpoint.dir());
    for (int index : {0, 1}) {
      const std::vector<int32_t> prompt = golden_prompt(name, index);
      GenerateOptions options;
      options.max_new_tokens = 20;
      const auto plain = generate(*model, prompt, options);
      for (int64_t k = 1; k <= 4; ++k) {
        SCOPED_TRACE("prompt " + std::to_string(index) + ", k " + std::to_string(k));
        MtpDrafter drafter(*model, {});
        SpeculativeOptions speculative;
        speculative.num_draft = k;
        const auto result = generate_speculative(*model, drafter, prompt, options, speculative);
        EXPECT_EQ(result.output_ids, plain.output_ids);
        EXPECT_GT(result.stats.drafted, 0);
      }
    }
  }
}

// A head fitted to predict the target's greedy tokens (testing::fitted_mtp_tensors) has its drafts
// accepted, first and chained ones, for k = 1..4: the drafter feeds it the hidden states of the
// right positions. (Random heads, above, are almost never right.)
TEST(MtpDrafter, FittedHeadDraftsAreAccepted) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const std::vector<std::vector<int32_t>> prompts = {golden_prompt(name, 0), golden_prompt(name, 1)};
    MtpCheckpoint checkpoint(name, testing::fitted_mtp_tensors(name, prompts, 24, 19));
    auto model = load_with_mtp(checkpoint.dir());
    for (const auto& prompt : prompts) {
      GenerateOptions options;
      options.max_new_tokens = 24;
      const auto plain = generate(*model, prompt, options);
      for (int64_t k = 1; k <= 4; ++k) {
        SCOPED_TRACE("prompt of " + std::to_string(prompt.size()) + ", k " + std::to_string(k));
        MtpDrafter drafter(*model, {});
        SpeculativeOptions speculative;
        speculative.num_draft = k;
        const auto result = generate_speculative(*model, drafter, prompt, options, speculative);
        EXPECT_EQ(result.output_ids, plain.output_ids);
        EXPECT_GE(result.stats.acceptance_rate(), 0.9)
            << result.stats.accepted << " of " << result.stats.drafted;
        if (k > 1) {
          EXPECT_GT(result.stats.accepted_at[1], 0) << "no chained draft accepted";
        }
        std::printf("%s prompt %zu k %lld: %lld of %lld drafts accepted, %.2f tokens/step\n", name,
                    prompt.size(), (long long)k, (long long)result.stats.accepted,
                    (long long)result.stats.drafted, result.stats.tokens_per_step());
      }
    }
  }
}

// An FP8 checkpoint's head (its linears E4M3 with 128x128 block scales, as the target's) loads, runs
// W8A8 like the target, and drafts losslessly.
TEST(MtpDrafter, Fp8HeadDraftsLosslessly) {
  const std::string name = "qwen3_5_fp8";
  MtpCheckpoint checkpoint(name, random_mtp_tensors(golden_config(name), 17), /*fp8_linears=*/true);
  auto model = load_with_mtp(checkpoint.dir());
  for (int index : {0, 1}) {
    const std::vector<int32_t> prompt = golden_prompt(name, index);
    GenerateOptions options;
    options.max_new_tokens = 12;
    const auto plain = generate(*model, prompt, options);
    for (int64_t k : {1, 3}) {
      SCOPED_TRACE("prompt " + std::to_string(index) + ", k " + std::to_string(k));
      MtpDrafter drafter(*model, {});
      SpeculativeOptions speculative;
      speculative.num_draft = k;
      const auto result = generate_speculative(*model, drafter, prompt, options, speculative);
      EXPECT_EQ(result.output_ids, plain.output_ids);
      EXPECT_GT(result.stats.drafted, 0);
    }
  }
}

// Forces a chosen number of accepted drafts each step (the target's own greedy tokens, then a
// wrong one) while the MTP drafter runs alongside; records what the MTP drafter proposed.
class AcceptanceForcingDrafter final : public Drafter {
 public:
  AcceptanceForcingDrafter(MtpDrafter& mtp, std::vector<int32_t> target_output,
                           int64_t prompt_length, int64_t vocab)
      : mtp_(mtp),
        output_(std::move(target_output)),
        prompt_length_(prompt_length),
        vocab_(vocab) {}
  std::string name() const override { return "forcing"; }
  void start(std::span<const int32_t> prompt, int64_t max_length) override {
    mtp_.start(prompt, max_length);
  }
  void propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) override {
    Draft mtp_draft;
    mtp_.propose(context, max_tokens, mtp_draft);
    records.push_back({{context.begin(), context.end()}, mtp_draft.tokens});
    const int64_t made = int64_t(context.size()) - prompt_length_;
    const int64_t accept =
        std::min<int64_t>(int64_t(records.size()) % (max_tokens + 1), max_tokens);
    draft.tokens.assign(output_.begin() + made, output_.begin() + made + accept);
    if (accept < max_tokens) draft.tokens.push_back((output_[made + accept] + 1) % int32_t(vocab_));
    accepted_counts.push_back(accept);
  }
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>
      records;  // context, MTP drafts
  std::vector<int64_t> accepted_counts;

 private:
  MtpDrafter& mtp_;
  std::vector<int32_t> output_;
  int64_t prompt_length_, vocab_;
};

// After any number of accepted drafts (0..k) the drafter proposes what a fresh drafter proposes
// from a prefill of the same context: the hidden rows it takes from the verify forward and the
// rollback of its own cache are right.
TEST(MtpDrafter, StateAfterAnyAcceptanceEqualsAFreshDrafter) {
  const std::string name = "qwen3_5_dense";
  MtpCheckpoint checkpoint(name, random_mtp_tensors(golden_config(name), 13));
  auto model = load_with_mtp(checkpoint.dir());
  const int64_t V = model->info().vocab_size, k = 4;
  const std::vector<int32_t> prompt = golden_prompt(name, 0);
  GenerateOptions options;
  options.max_new_tokens = 24;
  // One more plain token than generated, for the wrong draft after the last accepted one.
  GenerateOptions longer = options;
  longer.max_new_tokens += 1;
  const auto plain = generate(*model, prompt, longer);

  MtpDrafter mtp(*model, {});
  AcceptanceForcingDrafter forcing(mtp, plain.output_ids, int64_t(prompt.size()), V);
  SpeculativeOptions speculative;
  speculative.num_draft = k;
  const auto result = generate_speculative(*model, forcing, prompt, options, speculative);
  EXPECT_EQ(result.output_ids,
            std::vector<int32_t>(plain.output_ids.begin(), plain.output_ids.end() - 1));
  std::vector<int64_t> seen(k + 1, 0);
  for (size_t step = 0; step < forcing.accepted_counts.size(); ++step)
    if (step + 1 < forcing.accepted_counts.size()) ++seen[forcing.accepted_counts[step]];
  for (int64_t a = 0; a <= k; ++a) EXPECT_GT(seen[a], 0) << "no step accepted " << a << " drafts";

  ForwardOptions recurrent;
  recurrent.delta_rule = DeltaRuleChoice::kRecurrent;  // as the verify forwards
  for (const auto& [context, drafted] : forcing.records) {
    auto state = model->new_sequence(64);
    Buffer logits(DType::kF32, {1, V});
    MtpDrafter fresh(*model, {});
    model->forward(std::span<const int32_t>(context).first(context.size() - 1), *state, logits,
                   recurrent);
    fresh.start(context, 64);
    Draft draft;
    fresh.propose(context, int64_t(drafted.size()), draft);
    EXPECT_EQ(draft.tokens, drafted) << "context of " << context.size() << " tokens";
  }
}

// The serving engine's pattern (hidden states kept per target sequence, forward_batch keep_hidden):
// a drafter that catches up after every prompt chunk leaves its sequence nothing kept and then
// proposes what one that read the whole prompt at its first propose does (sampled drafts, so the
// draft distributions are compared too); a catch-up reads nothing the context cannot pair, and
// nothing again; the drafter names the first position it still needs.
TEST(MtpDrafter, CatchingUpAfterEveryChunkProposesAsReadingAtOnce) {
  const std::string name = "qwen3_5_dense";
  MtpCheckpoint checkpoint(name, random_mtp_tensors(golden_config(name), 17));
  auto model = load_with_mtp(checkpoint.dir());
  ASSERT_TRUE(model->keeps_sequence_hidden_states());
  const int64_t V = model->info().vocab_size, chunk = 8, k = 4;
  const std::vector<int32_t> ids = golden_prompt(name, 1);
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 37);  // 4 chunks and a remainder of 5
  const SamplingParams sampling{1.0f, 0, 1.0f, 5};
  auto eager_target = model->new_sequence(64), late_target = model->new_sequence(64);
  MtpDrafter eager(*model, sampling, MtpHiddenSource::kSequence), late(*model, sampling, MtpHiddenSource::kSequence);
  eager.start(prompt, 64);
  late.start(prompt, 64);
  eager.set_target_sequence(eager_target.get());
  late.set_target_sequence(late_target.get());
  Buffer logits(DType::kF32, {1, V});
  for (int64_t fed = 0; fed < int64_t(prompt.size());) {
    const int64_t count = std::min<int64_t>(chunk, int64_t(prompt.size()) - fed);
    for (SequenceState* target : {eager_target.get(), late_target.get()}) {
      const BatchItem item{std::span<const int32_t>(prompt).subspan(size_t(fed), size_t(count)), target, false, false,
                           true};
      model->forward_batch(std::span<const BatchItem>(&item, 1), logits);
    }
    fed += count;
    if (fed == int64_t(prompt.size())) break;  // the last chunk's hidden states pair with tokens to come
    eager.catch_up(prompt, fed);
    EXPECT_EQ(model->sequence_hidden_positions(*eager_target).count, 0) << fed;
    EXPECT_EQ(eager.target_hidden_needed_from(), fed);
    eager.catch_up(prompt, fed);  // nothing new
    EXPECT_EQ(eager.target_hidden_needed_from(), fed);
  }
  EXPECT_EQ(model->sequence_hidden_positions(*late_target).count, int64_t(prompt.size()));
  EXPECT_EQ(late.target_hidden_needed_from(), 0);
  // The whole prompt is fed: its last position pairs with the first generated token, not yet here.
  eager.catch_up(prompt, int64_t(prompt.size()));
  EXPECT_EQ(eager.target_hidden_needed_from(), int64_t(prompt.size()) - 1);
  EXPECT_EQ(model->sequence_hidden_positions(*eager_target).start, int64_t(prompt.size()) - 1);

  std::vector<int32_t> context = prompt;
  context.push_back(ids[prompt.size()]);
  Draft eager_draft, late_draft;
  eager.propose(context, k, eager_draft);
  late.propose(context, k, late_draft);
  EXPECT_EQ(eager_draft.tokens, late_draft.tokens);
  ASSERT_EQ(eager_draft.probs.size(), size_t(k * V));
  ASSERT_EQ(late_draft.probs.size(), eager_draft.probs.size());
  EXPECT_LE(relative_l2(eager_draft.probs.data(), late_draft.probs.data(), k * V), numerics::kSamePathRelL2);
  for (SequenceState* target : {eager_target.get(), late_target.get()})
    EXPECT_EQ(model->sequence_hidden_positions(*target).count, 0);
  EXPECT_EQ(eager.target_hidden_needed_from(), int64_t(context.size()) - 1);
  EXPECT_EQ(late.target_hidden_needed_from(), int64_t(context.size()) - 1);
}

// Loading: mtp.* is ignored unless asked for; asked for, it must be there, well shaped and whole.
TEST(MtpDrafter, LoadingIsStrict) {
  const std::string name = "qwen3_5_dense";
  const Qwen35Config config = golden_config(name);
  const std::string golden = std::string(VT_SOURCE_DIR) + "/tests/golden/" + name;
  expect_error([&] { load_with_mtp(golden); }, "no MTP head (no mtp.fc.weight)");
  Qwen35Model plain(golden, {});
  EXPECT_FALSE(plain.has_mtp());
  expect_error([&] { MtpDrafter drafter(plain, {}); }, "loaded without its MTP head");

  Tensors tensors = random_mtp_tensors(config, 3);
  {
    MtpCheckpoint checkpoint(name, tensors);
    EXPECT_TRUE(load_with_mtp(checkpoint.dir())->has_mtp());
    Qwen35Model without(checkpoint.dir(), {});  // declared ignored
    EXPECT_FALSE(without.has_mtp());
    EXPECT_NE(without.describe().find("ignored: mtp.*"), std::string::npos);
  }
  for (const char* broken : {"mtp.fc.weight", "mtp.layers.0.self_attn.k_norm.weight",
                             "mtp.layers.0.mlp.down_proj.weight"}) {
    SCOPED_TRACE(broken);
    Tensors wrong = tensors;
    auto& [shape, values] = wrong.at(broken);
    shape.back() -= 1;
    values.resize(values.size() / (shape.back() + 1) * shape.back());
    MtpCheckpoint checkpoint(name, wrong);
    expect_error([&] { load_with_mtp(checkpoint.dir()); }, broken);
    Qwen35Model without(checkpoint.dir(), {});  // not read: not checked
  }
  {
    Tensors extra = tensors;
    extra["mtp.layers.0.mlp.extra_proj.weight"] = {{2, 2}, {1, 2, 3, 4}};
    MtpCheckpoint checkpoint(name, extra);
    expect_error([&] { load_with_mtp(checkpoint.dir()); }, "'mtp.layers.0.mlp.extra_proj.weight'");
  }
  {
    Tensors two_layers = tensors;
    two_layers["mtp.layers.1.input_layernorm.weight"] = {{config.hidden_size},
                                                         std::vector<float>(config.hidden_size)};
    MtpCheckpoint checkpoint(name, two_layers);
    expect_error([&] { load_with_mtp(checkpoint.dir()); }, "vt runs one");
  }
}

}  // namespace
}  // namespace vt
