// `vt bench decode`: decode speed next to its floor (bytes one step must move over the memory
// bandwidth measured at start-up) and, with --predict, the prediction written before the run.
// `vt bench prefill`: prompt tokens/s, the chunked GDN delta rule against the token-by-token one
// in the same run, with the GDN kernels' share of the time (CUPTI).
// `vt profile decode`: where one decode step went, per kernel (CUPTI records of the running
// process, CUDA-graph launches included) or, on the CPU, per timed op; per op group; idle time.
// Both run on the GPU (checkpoint or synthetic model) or the CPU reference (--device cpu).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/bench_model.h"
#include "apps/cli_lists.h"
#include "apps/commands.h"
#include "apps/lm_head_options.h"
#include "core/error.h"
#include "cuda/device.h"
#include "models/registry.h"
#include "ops/gdn/gdn.h"
#include "ops/gemm/gemm.h"
#include "ops/sampling/sampler.h"
#include "profile/prediction.h"
#include "profile/step_report.h"
#include "trace/op_timer.h"
#ifdef VT_WITH_CUDA
#include <cuda_runtime.h>

#include "models/qwen3_5/config.h"
#include "profile/kernel_gate.h"
#include "profile/kernel_recorder.h"
#include "runtime/qwen3_5_cuda.h"
#include "trace/intent.h"
#endif
#ifdef VT_WITH_NCCL
#include "parallel/tensor_parallel_cuda_model.h"
#endif

namespace {

using vt::apps::BenchArgs;
using vt::apps::first_token;

std::vector<int64_t> parse_list(const std::string& text) { return vt::apps::parse_int_list(text, "--batch", 1, 1024); }

// "cpu" or "cuda": --device, else the GPU where vt was built with CUDA.
std::string resolve_device(const BenchArgs& args) {
  std::string device = args.device;
#ifdef VT_WITH_CUDA
  if (device.empty()) device = "cuda";
#else
  if (device.empty()) device = "cpu";
  VT_CHECK(device != "cuda", "--device cuda: this vt was built without CUDA");
#endif
  VT_CHECK(device == "cpu" || device == "cuda", "--device '", device, "': expected cpu or cuda");
  return device;
}


void write_json_file(const std::string& path, const nlohmann::json& json) {
  std::ofstream out(path);
  VT_CHECK(out, path, ": cannot write");
  out << json.dump() << "\n";
  VT_CHECK(out.good(), path, ": write failed");
}

// Prints (or collects as JSON) the step report, writes the trace, and fails when the shares do
// not add up: a profile whose parts do not make the whole is not reported as fine.
void emit_profile(const BenchArgs& args, nlohmann::json header, const std::string& title,
                  const vt::profile::StepReport& report, const std::vector<vt::profile::StepSpan>& spans) {
  if (!args.trace.empty()) write_json_file(args.trace, vt::profile::chrome_trace(spans, title));
  if (args.json) {
    header.update(vt::profile::report_json(report));
    std::cout << header.dump(2) << std::endl;
  } else {
    std::printf("%s\n%s", title.c_str(), vt::profile::report_text(report).c_str());
    std::fflush(stdout);
  }
  VT_CHECK(report.shares_consistent(), "profile: the shares sum to ", 100.0 * report.share_sum,
           "% of the step, not 100% within 2% (records outside the timed window)");
}

// The decode benchmark's table: batch, result, floor and (with --predict) the prediction, which
// is read and printed before any step runs.
class BenchTable {
 public:
  BenchTable(const BenchArgs& args, const std::vector<int64_t>& batches) : args_(args) {
    if (args.predict.empty()) return;
    predictions_ = vt::profile::read_predictions(args.predict);
    for (int64_t batch : batches)
      VT_CHECK(predictions_.count(batch), args.predict, ": no prediction for batch ", batch);
  }

  void begin(nlohmann::json header, const std::string& title) {
    report_ = std::move(header);
    report_["rows"] = nlohmann::json::array();
    if (!predictions_.empty()) {
      report_["predicted_ms"] = nlohmann::json::object();
      for (const auto& [batch, ms] : predictions_) report_["predicted_ms"][std::to_string(batch)] = ms;
    }
    if (args_.json) return;
    std::printf("%s\n", title.c_str());
    if (!predictions_.empty()) {
      std::printf("prediction (%s, read before the run):", args_.predict.c_str());
      for (const auto& [batch, ms] : predictions_) std::printf(" batch %lld %.3f ms;", (long long)batch, ms);
      std::printf("\n");
    }
    std::printf("\n| batch | ms/step | tok/s | floor ms | floor tok/s | of floor |%s\n|---|---|---|---|---|---|%s\n",
                predictions_.empty() ? "" : " predicted ms | result / predicted |",
                predictions_.empty() ? "" : "---|---|");
    std::fflush(stdout);
  }

  void row(int64_t batch, double ms, double floor_ms) {
    const double tokens_per_second = double(batch) * 1e3 / ms;
    nlohmann::json row = {{"batch", batch}, {"ms_per_step", ms}, {"tokens_per_second", tokens_per_second},
                          {"floor_ms", floor_ms}, {"floor_fraction", floor_ms / ms}};
    const auto predicted = predictions_.find(batch);
    if (predicted != predictions_.end())
      row.update({{"predicted_ms", predicted->second}, {"vs_prediction", ms / predicted->second}});
    report_["rows"].push_back(row);
    if (args_.json) return;
    std::printf("| %lld | %.3f | %.1f | %.3f | %.1f | %.0f%% |", (long long)batch, ms, tokens_per_second, floor_ms,
                double(batch) * 1e3 / floor_ms, 100.0 * floor_ms / ms);
    if (predicted != predictions_.end()) std::printf(" %.3f | %.2fx |", predicted->second, ms / predicted->second);
    std::printf("\n");
    std::fflush(stdout);
  }

  void finish() {
    if (args_.json) std::cout << report_.dump(2) << std::endl;
  }

 private:
  const BenchArgs& args_;
  std::map<int64_t, double> predictions_;
  nlohmann::json report_;
};

// ---- CPU reference: `batch` sequences, each fed one token per step, greedy on the host. ----

struct CpuDecode {
  std::unique_ptr<vt::Model> model;
  std::vector<std::unique_ptr<vt::SequenceState>> sequences;
  std::vector<int32_t> tokens;
  vt::Buffer logits;
};

// Loads --model and fills each sequence with --context prompt tokens (untimed).
CpuDecode open_cpu_decode(const BenchArgs& args, int64_t batch, int64_t steps) {
  VT_CHECK(args.synthetic.empty(), "--synthetic models run on the GPU only; give --model DIR with --device cpu");
  VT_CHECK(!args.model.empty(), "give --model DIR");
  VT_CHECK(args.context >= 1 && steps >= 1, "--context and --steps must be positive");
  CpuDecode decode;
  decode.model = vt::load_model(args.model, vt::LoadOptions{});
  if (const auto quantization = vt::apps::lm_head_quantization(args.lm_head)) decode.model->quantize_lm_head_fp8(*quantization);
  const int64_t vocab = decode.model->info().vocab_size, capacity = args.context + steps + 1;
  VT_CHECK(capacity <= decode.model->info().max_positions, "--context ", args.context, " + --steps ", steps,
           " exceed the model's ", decode.model->info().max_positions, " positions");
  decode.logits = vt::Buffer(vt::DType::kF32, {1, vocab});
  for (int64_t sequence = 0; sequence < batch; ++sequence) {
    std::vector<int32_t> prompt(size_t(args.context));
    for (int64_t i = 0; i < args.context; ++i) prompt[i] = first_token(sequence + i, vocab);
    decode.sequences.push_back(decode.model->new_sequence(capacity));
    decode.model->forward(prompt, *decode.sequences.back(), decode.logits, vt::ForwardOptions{});
    decode.tokens.push_back(vt::argmax(decode.logits.f32(), vocab));
  }
  return decode;
}

void cpu_decode_step(CpuDecode& decode) {
  const int64_t vocab = decode.model->info().vocab_size;
  for (size_t sequence = 0; sequence < decode.sequences.size(); ++sequence) {
    const int32_t token = decode.tokens[sequence];
    decode.model->forward({&token, 1}, *decode.sequences[sequence], decode.logits, vt::ForwardOptions{});
    vt::trace::ScopedOpTimer timer("argmax", vt::trace::OpGroup::kSampling, {vocab}, 4.0 * double(vocab),
                                     double(vocab));
    decode.tokens[sequence] = vt::argmax(decode.logits.f32(), vocab);
  }
}

void run_profile_decode_cpu(const BenchArgs& args, int64_t batch) {
  const double bandwidth = vt::trace::measure_memcpy_bandwidth();
  CpuDecode decode = open_cpu_decode(args, batch, args.steps + 1);
  cpu_decode_step(decode);  // warm-up
  vt::trace::OpRecorder recorder;
  recorder.start();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < args.steps; ++step) cpu_decode_step(decode);
  const double wall_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const auto spans = vt::profile::spans_from_ops(recorder.stop());
  VT_CHECK(!spans.empty(), "the CPU recorder timed no ops: the profile would be empty");
  const auto report = vt::profile::build_step_report(
      spans, {args.steps, wall_us, bandwidth, "op", "outside ops (model code between ops)"});
  char title[512];
  std::snprintf(title, sizeof(title), "%s (cpu), batch %lld, context %lld, memcpy bandwidth %.0f GB/s",
                args.model.c_str(), (long long)batch, (long long)args.context, bandwidth);
  emit_profile(args,
               {{"model", args.model}, {"device", "cpu"}, {"batch", batch}, {"context", args.context},
                {"steps", args.steps}},
               title, report, spans);
}

void run_bench_decode_cpu(const BenchArgs& args, const std::vector<int64_t>& batches) {
  BenchTable table(args, batches);
  const double bandwidth = vt::trace::measure_memcpy_bandwidth();
  char title[512];
  std::snprintf(title, sizeof(title), "%s (cpu), context %lld, memcpy bandwidth %.0f GB/s", args.model.c_str(),
                (long long)args.context, bandwidth);
  table.begin({{"model", args.model}, {"device", "cpu"}, {"context", args.context}, {"bandwidth_gbps", bandwidth}},
              title);
  for (int64_t batch : batches) {
    CpuDecode decode = open_cpu_decode(args, batch, args.steps + 2);
    // The floor's bytes: what the ops of one (warm-up) step say they move.
    vt::trace::OpRecorder recorder;
    recorder.start();
    cpu_decode_step(decode);
    double bytes = 0;
    for (const auto& op : recorder.stop()) bytes += op.bytes;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < args.steps; ++step) cpu_decode_step(decode);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
                      double(args.steps);
    table.row(batch, ms, bytes / (bandwidth * 1e9) * 1e3);
  }
  table.finish();
}

#ifdef VT_WITH_CUDA
using vt::apps::bench_config;
using vt::apps::bench_model_options;
using vt::apps::make_bench_model;

size_t weight_bytes(const vt::Qwen35CudaModel& model) { return model.weights().bytes(); }

// The model a benchmark runs: a checkpoint folder or a synthetic model, with random KV cache and
// GDN state (the contents do not change the work done).
std::unique_ptr<vt::Qwen35CudaModel> open_cuda_model(const BenchArgs& args, const std::vector<int64_t>& batches,
                                                     std::string* name) {
  const vt::CudaModelOptions options = bench_model_options(args, batches);
  const vt::Qwen35Config config = bench_config(args);
  std::unique_ptr<vt::Qwen35CudaModel> model = make_bench_model(args, options, name);
  model->randomize_state(99);
  return model;
}

#ifdef VT_WITH_NCCL
size_t weight_bytes(const vt::TensorParallelCudaModel& model) { return model.weight_bytes(); }

// As open_cuda_model, split over --tensor-parallel GPUs.
std::unique_ptr<vt::TensorParallelCudaModel> open_tensor_parallel_model(const BenchArgs& args,
                                                                        const std::vector<int64_t>& batches,
                                                                        std::string* name) {
  vt::CudaModelOptions options = bench_model_options(args, batches);
  const vt::Qwen35Config config = bench_config(args);
  const vt::TensorParallelPlan plan(config, args.tensor_parallel);
  std::unique_ptr<vt::TensorParallelCudaModel> model;
  if (!args.synthetic.empty()) {
    VT_CHECK(args.weights == "fp8" || args.weights == "bf16", "--weights: expected fp8 or bf16, got '", args.weights, "'");
    model = vt::TensorParallelCudaModel::synthetic(config, args.weights == "fp8", args.tensor_parallel, options, 1234,
                                                   args.synthetic + " (synthetic, " + args.weights + ")");
  } else {
    model = vt::TensorParallelCudaModel::load(args.model, args.tensor_parallel, options);
  }
  *name = model->describe().substr(0, model->describe().find('\n'));
  model->randomize_state(99);
  return model;
}
#endif

// The kernel-ran gate: one step's launches are recorded as intents (an ungraphed step runs the
// same launch sequence the graph captured), then graphed steps run under CUPTI. Every kernel vt
// meant to launch must have run exactly intended x steps times; otherwise this throws naming the
// op, the backend and what ran instead. Returns the step's intents.
template <class CudaModel>
std::vector<vt::trace::Intent> check_kernels_ran(CudaModel& model, std::vector<int32_t> tokens,
                                                   const std::vector<int32_t>& positions, bool use_graph) {
  std::vector<int32_t> next;
  vt::trace::begin_intents();
  model.decode_step(tokens, positions, &next, false);
  auto intents = vt::trace::end_intent_records();
  constexpr int kSteps = 3;
  vt::profile::KernelRecorder recorder;
  recorder.start();
  for (int step = 0; step < kSteps; ++step) model.decode_step(tokens, positions, &next, use_graph);
  vt::profile::check_kernels_ran(intents, recorder.stop(), kSteps);
  return intents;
}

void run_profile_decode_cuda(const BenchArgs& args, int64_t batch) {
  VT_CHECK(vt::cuda::device_count() > 0, "vt profile decode needs a CUDA GPU (or --device cpu)");
  const double bandwidth = vt::cuda::measure_read_bandwidth(size_t(4) << 30);  // GB/s
  std::string name;
  auto model = open_cuda_model(args, {batch}, &name);
  std::vector<int32_t> tokens(batch), positions(batch, int32_t(args.context)), next;
  for (int64_t i = 0; i < batch; ++i) tokens[i] = first_token(i, model->config().vocab_size);
  for (int warm = 0; warm < 3; ++warm) model->decode_step(tokens, positions, &next, !args.no_graph);
  const auto intents = check_kernels_ran(*model, tokens, positions, !args.no_graph);

  vt::profile::KernelRecorder recorder;
  recorder.start();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < args.steps; ++step) {
    model->decode_step(tokens, positions, &next, !args.no_graph);
    tokens = next;
  }
  const double wall_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const auto records = recorder.stop();
  VT_CHECK(!records.empty(), "CUPTI recorded no kernels: the profile would be empty");
  const auto spans = vt::profile::spans_from_kernels(records, intents);
  const auto report = vt::profile::build_step_report(spans, {args.steps, wall_us, bandwidth});
  char title[256];
  std::snprintf(title, sizeof(title), "%s, batch %lld, context %lld, read bandwidth %.0f GB/s", name.c_str(),
                (long long)batch, (long long)args.context, bandwidth);
  emit_profile(args,
               {{"model", name}, {"device", "cuda"}, {"batch", batch}, {"context", args.context}, {"steps", args.steps}},
               title, report, spans);
}

// The timed rows of `vt bench decode` on one GPU or a tensor-parallel world (the floor: the
// busiest GPU's bytes over one GPU's bandwidth).
template <class CudaModel>
void bench_decode_rows(const BenchArgs& args, const std::vector<int64_t>& batches, CudaModel* model,
                       const std::string& name, double bandwidth) {
  BenchTable table(args, batches);
  char title[512];
  std::snprintf(title, sizeof(title), "%s, context %lld, read bandwidth %.0f GB/s per GPU, weights %.2f GB",
                name.c_str(), (long long)args.context, bandwidth, weight_bytes(*model) / 1e9);
  table.begin({{"model", name}, {"device", "cuda"}, {"context", args.context}, {"bandwidth_gbps", bandwidth},
               {"weight_bytes", weight_bytes(*model)}, {"graphs", !args.no_graph},
               {"tensor_parallel", args.tensor_parallel}},
              title);
  for (int64_t batch : batches) {
    std::vector<int32_t> tokens(batch), positions(batch, int32_t(args.context)), next;
    for (int64_t i = 0; i < batch; ++i) tokens[i] = first_token(i, model->config().vocab_size);
    // Warm-up (graph capture), then timed steps feeding each step's argmax back.
    for (int warm = 0; warm < 3; ++warm) model->decode_step(tokens, positions, &next, !args.no_graph);
    const auto start = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < args.steps; ++step) {
      model->decode_step(tokens, positions, &next, !args.no_graph);
      tokens = next;
      for (auto& position : positions) position = int32_t(args.context + step % 4);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double ms = seconds * 1e3 / double(args.steps);
    const double floor_ms = model->decode_bytes(batch, args.context) / (bandwidth * 1e9) * 1e3;
    check_kernels_ran(*model, tokens, positions, !args.no_graph);
    table.row(batch, ms, floor_ms);
  }
  table.finish();
}

std::vector<double> parse_rates(const std::string& text) {
  std::vector<double> rates;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    double rate = -1;
    try {
      rate = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    VT_CHECK(used == item.size() && rate >= 0 && rate < 1, "--acceptance: '", item, "' is not a rate in [0, 1)");
    rates.push_back(rate);
  }
  VT_CHECK(!rates.empty(), "--acceptance: empty list");
  return rates;
}

// Tokens a verify step of k drafts yields when each draft is accepted with probability `rate`,
// independently, up to the first rejection, plus the target's own token: (1 - a^(k+1)) / (1 - a).
double expected_tokens_per_step(double rate, int64_t k) { return (1.0 - std::pow(rate, double(k + 1))) / (1.0 - rate); }

// `vt bench decode --verify K,...`: speculative decoding's cost side. Per batch: the 1-token decode
// step (CUDA graph, as the decode table measures it); the same step ungraphed through the verify
// path (k = 0); and per k a verify of k + 1 tokens per sequence (rollback windows kept, device
// argmax of every row) followed by rolling every sequence back to where it started (a rejection's
// cost: one window entry copied back) and commit. Sequences hold --context prefilled tokens. The
// drafter's own cost is not included (the n-gram drafter's is ~0; a draft model adds its steps).
void run_bench_verify_cuda(const BenchArgs& args, const std::vector<int64_t>& batches) {
  const std::vector<int64_t> ks = vt::apps::parse_int_list(args.verify, "--verify", 1, 16);
  const std::vector<double> rates = parse_rates(args.acceptance);
  const int64_t max_drafts = *std::max_element(ks.begin(), ks.end());
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  vt::CudaModelOptions options = bench_model_options(args, batches);
  options.max_context = args.context + args.steps + 8 + max_drafts;
  options.max_step_tokens = std::max<int64_t>(max_batch * (max_drafts + 1), 256);  // 256: prefill chunks
  options.max_logit_rows = max_batch * (max_drafts + 1);
  options.max_rollback_tokens = max_drafts + 1;
  std::vector<int64_t> step_rows;
  for (int64_t batch : batches)
    for (int64_t k : ks) step_rows.push_back(batch * (k + 1));
  std::string name;
  std::unique_ptr<vt::Qwen35CudaModel> model = make_bench_model(args, options, &name);
  const int64_t vocab = model->config().vocab_size;
  nlohmann::json report = {{"model", name},   {"device", "cuda"},         {"context", args.context},
                           {"steps", args.steps}, {"acceptance", rates}, {"batches", nlohmann::json::array()}};
  if (!args.json)
    std::printf("%s, context %lld: k + 1-token verify (+ rollback) vs 1-token step; drafter cost not included\n",
                name.c_str(), (long long)args.context);
  for (int64_t batch : batches) {
    std::vector<std::unique_ptr<vt::SequenceState>> states;
    vt::Buffer logits(vt::DType::kF32, {1, vocab});
    std::vector<int32_t> prompt(size_t(args.context));
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t t = 0; t < args.context; ++t) prompt[size_t(t)] = first_token(i * args.context + t, vocab);
      states.push_back(model->new_sequence(args.context + args.steps + 8 + max_drafts));
      model->forward(prompt, *states.back(), logits, {});
    }
    const auto time_ms = [&](const std::function<void()>& step) {
      for (int warm = 0; warm < 3; ++warm) step();
      vt::cuda::synchronize();
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < args.steps; ++i) step();
      vt::cuda::synchronize();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
             double(args.steps);
    };
    // The graphed 1-token step, at the sequences' slots and length (as `vt bench decode`).
    std::vector<int32_t> decode_tokens(static_cast<size_t>(batch)), positions(static_cast<size_t>(batch), int32_t(args.context));
    std::vector<int32_t> next;
    for (int64_t i = 0; i < batch; ++i) decode_tokens[size_t(i)] = first_token(i, vocab);
    const double one_ms = time_ms([&] { model->decode_step(decode_tokens, positions, &next, !args.no_graph); });
    std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(batch));
    const auto items_of = [&](int64_t k) {
      std::vector<vt::BatchItem> items;
      for (int64_t i = 0; i < batch; ++i) {
        tokens[size_t(i)].resize(size_t(k + 1));
        for (int64_t t = 0; t <= k; ++t) tokens[size_t(i)][size_t(t)] = first_token(i * 31 + t + 5, vocab);
        items.push_back({tokens[size_t(i)], states[size_t(i)].get(), k > 0});
      }
      return items;
    };
    nlohmann::json rows = nlohmann::json::array();
    if (!args.json) {
      std::printf("\nbatch %lld: 1-token step %.3f ms (%s), %.1f tok/s; ms per draft = (verify - 1-token) / k; "
                  "tok/s at acceptance a: (1 - a^(k+1)) / (1 - a) tokens per verify\n\n| k | tokens/step | ms/step | "
                  "x 1-token | ms per draft |",
                  (long long)batch, one_ms, args.no_graph ? "no graph" : "CUDA graph", double(batch) * 1e3 / one_ms);
      for (double rate : rates) std::printf(" tok/s at a=%.2f |", rate);
      std::printf("\n|---|---|---|---|---|");
      for (size_t i = 0; i < rates.size(); ++i) std::printf("---|");
      std::printf("\n");
    }
    std::vector<int64_t> row_ks = {0};
    row_ks.insert(row_ks.end(), ks.begin(), ks.end());
    for (int64_t k : row_ks) {
      const std::vector<vt::BatchItem> items = items_of(k);
      const int64_t length = states[0]->length();
      // k = 0 advances the sequences a token per step (nothing to roll back; their capacity has
      // room): the verifies after it run a few dozen tokens further into the context.
      const double ms = time_ms([&] {
        model->verify_greedy(items, &next);
        if (k == 0) return;
        for (auto& state : states) {
          model->rollback(*state, length);
          model->commit(*state);
        }
      });
      nlohmann::json row = {{"k", k}, {"tokens_per_step", batch * (k + 1)}, {"ms_per_step", ms},
                            {"vs_one_token", ms / one_ms},
                            {"ms_per_draft", k > 0 ? (ms - one_ms) / double(k) : 0.0}};
      nlohmann::json projected = nlohmann::json::array();
      for (double rate : rates) {
        const double expected = k > 0 ? expected_tokens_per_step(rate, k) : 1.0;
        const double tokens_per_second = double(batch) * expected * 1e3 / ms;
        projected.push_back({{"acceptance", rate}, {"tokens_per_verify", expected},
                             {"tokens_per_second", tokens_per_second},
                             {"speedup", tokens_per_second / (double(batch) * 1e3 / one_ms)}});
      }
      row["projected"] = projected;
      rows.push_back(row);
      if (args.json) continue;
      char per_draft[32] = "-";
      if (k > 0) std::snprintf(per_draft, sizeof(per_draft), "%.3f", (ms - one_ms) / double(k));
      std::printf("| %lld%s | %lld | %.3f | %.2fx | %s |", (long long)k, k == 0 ? " (no graph)" : "",
                  (long long)(batch * (k + 1)), ms, ms / one_ms, per_draft);
      for (const auto& p : projected)
        std::printf(" %.1f (%.2fx) |", p["tokens_per_second"].get<double>(), p["speedup"].get<double>());
      std::printf("\n");
      std::fflush(stdout);
    }
    report["batches"].push_back({{"batch", batch}, {"one_token_ms", one_ms}, {"graphs", !args.no_graph}, {"rows", rows}});
  }
  if (args.json) std::cout << report.dump(2) << std::endl;
}

void run_bench_decode_cuda(const BenchArgs& args, const std::vector<int64_t>& batches) {
  VT_CHECK(vt::cuda::device_count() > 0, "vt bench decode needs a CUDA GPU (or --device cpu)");
  VT_CHECK(args.context >= 1 && args.steps >= 1, "--context and --steps must be positive");
  if (!args.verify.empty()) {
    VT_CHECK(args.tensor_parallel == 1, "--verify runs on one GPU (--tensor-parallel 1)");
    return run_bench_verify_cuda(args, batches);
  }
  const double bandwidth = vt::cuda::measure_read_bandwidth(size_t(4) << 30);  // GB/s
  std::string name;
  if (args.tensor_parallel > 1) {
#ifdef VT_WITH_NCCL
    auto model = open_tensor_parallel_model(args, batches, &name);
    return bench_decode_rows(args, batches, model.get(), name, bandwidth);
#else
    VT_FAIL("--tensor-parallel ", args.tensor_parallel, ": this vt was built without NCCL");
#endif
  }
  auto model = open_cuda_model(args, batches, &name);
  bench_decode_rows(args, batches, model.get(), name, bandwidth);
}
#endif

void run_profile_decode(const BenchArgs& args) {
  const std::vector<int64_t> batches = parse_list(args.batches);
  VT_CHECK(batches.size() == 1, "vt profile decode takes one --batch");
  VT_CHECK(args.tensor_parallel == 1, "vt profile decode runs on one GPU (--tensor-parallel 1)");
  VT_CHECK(args.steps >= 1, "--steps must be positive");
  if (resolve_device(args) == "cpu") return run_profile_decode_cpu(args, batches[0]);
#ifdef VT_WITH_CUDA
  run_profile_decode_cuda(args, batches[0]);
#endif
}

void run_bench_prefill(const BenchArgs& args) {
  VT_CHECK(resolve_device(args) == "cuda", "vt bench prefill runs on the GPU (--device cuda)");
  VT_CHECK(args.tensor_parallel == 1, "vt bench prefill runs on one GPU (--tensor-parallel 1)");
#ifdef VT_WITH_CUDA
  vt::apps::run_bench_prefill_cuda(args);
#endif
}

void run_bench_decode(const BenchArgs& args) {
  const std::vector<int64_t> batches = parse_list(args.batches);
  VT_CHECK(args.context >= 1 && args.steps >= 1, "--context and --steps must be positive");
  VT_CHECK(args.verify.empty() || resolve_device(args) == "cuda", "--verify: the verify benchmark runs on the GPU");
  if (resolve_device(args) == "cpu") return run_bench_decode_cpu(args, batches);
#ifdef VT_WITH_CUDA
  run_bench_decode_cuda(args, batches);
#endif
}

}  // namespace

namespace vt::apps {
namespace {

void add_decode_options(CLI::App* decode, BenchArgs& args, const char* batch_help, const char* steps_help) {
  decode->add_option("--model", args.model, "HF model folder");
  decode->add_option("--synthetic", args.synthetic, "qwen3.5-27b | qwen3.5-35b-a3b | qwen3-next-80b (GPU)");
  decode->add_option("--weights", args.weights, "synthetic weights: fp8 (128x128 blocks) or bf16");
  decode->add_option("--batch", args.batches, batch_help);
  decode->add_option("--context", args.context, "tokens already in each sequence's cache");
  decode->add_option("--steps", args.steps, steps_help);
  decode->add_option("--device", args.device, "cuda (default where built with CUDA) or cpu (the reference)");
  vt::apps::add_lm_head_options(decode, args.lm_head);
  decode->add_option("--gemm-exclude", args.gemm_exclude,
                     "FP8 GEMM backends the start-up tuning leaves out, e.g. wgmma,wgmma_cluster (A/B runs)");
  decode->add_flag("--no-graph", args.no_graph, "launch kernels one by one instead of a CUDA graph");
  decode->add_flag("--json", args.json, "print a JSON report");
  decode->add_option("--tensor-parallel", args.tensor_parallel, "GPUs to split the model over (NCCL; bench decode)")
      ->check(CLI::Range(1, 64));
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  auto* decode = bench->add_subcommand("decode", "Decode ms/step and tokens/s next to the bandwidth floor");
  add_decode_options(decode, *args, "comma-separated batch sizes, e.g. 1,16,64", "timed decode steps per batch size");
  decode->add_option("--predict", args->predict,
                     "predicted ms/step per batch, written before the run: JSON {\"1\": 12.5} or lines 'batch ms'");
  decode->add_option("--verify", args->verify,
                     "speculative verify steps of these numbers of drafts, e.g. 1,2,4,8: ms vs a 1-token step, "
                     "marginal ms per draft, projected tok/s (GPU)");
  decode->add_option("--acceptance", args->acceptance, "--verify: draft acceptance rates to project, e.g. 0.5,0.7,0.9");
  decode->callback([args] { run_bench_decode(*args); });

  auto prefill_args = std::make_shared<BenchArgs>();
  auto* prefill = bench->add_subcommand(
      "prefill", "Prompt prefill tokens/s: chunked vs token-by-token GDN delta rule, with the GDN kernels' share");
  prefill->add_option("--model", prefill_args->model, "HF model folder");
  prefill->add_option("--synthetic", prefill_args->synthetic, "qwen3.5-27b | qwen3.5-35b-a3b | qwen3-next-80b");
  prefill->add_option("--weights", prefill_args->weights, "synthetic weights: fp8 (128x128 blocks) or bf16");
  prefill->add_option("--tokens", prefill_args->prompt_tokens, "comma-separated prompt lengths, e.g. 1024,4096");
  prefill->add_option("--step-tokens", prefill_args->step_tokens, "tokens per forward step (longer prompts: several)");
  prefill->add_option("--repeats", prefill_args->repeats, "timed prefills per row (the median is reported)");
  vt::apps::add_lm_head_options(prefill, prefill_args->lm_head);
  prefill->add_option("--device", prefill_args->device, "cuda (the only device it runs on)");
  prefill->add_option("--max-running", prefill_args->max_running,
                      "sequence slots of the model, as vt serve --max-running (default 1)");
  prefill->add_option("--max-context", prefill_args->max_context,
                      "tokens per sequence, as vt serve --max-context (default: the longest prompt)");
  prefill->add_option("--prefill-chunk", prefill_args->prefill_chunk,
                      "the engine path's prompt chunk, as vt serve --prefill-chunk (default 256)");
  prefill->add_option("--prompt-chunks-per-step", prefill_args->prompt_chunks_per_step,
                      "the engine path's consecutive chunks of one prompt per forward_batch, as vt serve "
                      "--prompt-chunks-per-step (default 0: vt serve's on a GPU, 4 chunks + --max-running over "
                      "the chunk)");
  prefill->add_option("--decoding", prefill_args->decoding,
                      "the engine path's steps also decode this many other sequences (at --context tokens)");
  prefill->add_option("--context", prefill_args->context, "--decoding: the decoding sequences' context (default 1024)");
  prefill->add_option("--prompts", prefill_args->prompts,
                      "the engine path prefills this many prompts of each length at once, packed as the engine "
                      "packs steps (--step-tokens per step; tok/s counts them all)");
  prefill->add_option("--kernels", prefill_args->kernels, "print the N kernels that took longest in the profiled runs");
  prefill->add_option("--paths", prefill_args->prefill_paths,
                      "paths per length: chunked, token-by-token, engine (comma-separated; long prompts: chunked)");
  prefill->add_option("--decode-after", prefill_args->decode_after,
                      "decode N tokens after the chunked path's prompt and report ms per token");
  prefill->add_option("--prefill-attention", prefill_args->prefill_attention,
                      "flashinfer: long sequences' attention on FlashInfer's sm90 prefill kernel (default); "
                      "paged: every token on the flash-decoding kernels (A/B runs)")
      ->check(CLI::IsMember({"flashinfer", "paged"}));
  prefill->add_flag("--json", prefill_args->json, "print a JSON report");
  prefill->callback([prefill_args] { run_bench_prefill(*prefill_args); });
}

void add_profile_commands(CLI::App& app) {
  auto* profile = app.add_subcommand("profile", "Where the time went, from the running process");
  profile->require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  args->steps = 60;
  auto* decode = profile->add_subcommand("decode", "Per-kernel (CUPTI) or per-op (CPU) time of decode steps");
  add_decode_options(decode, *args, "batch size", "recorded decode steps");
  decode->add_option("--trace", args->trace, "write a Chrome trace (chrome://tracing, Perfetto) to this file");
  decode->callback([args] { run_profile_decode(*args); });
}

}  // namespace vt::apps
