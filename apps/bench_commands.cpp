// `vt bench decode`: decode speed on the GPU next to its floor (bytes one step must move over the
// read bandwidth measured at start-up), per batch size, from a checkpoint or a synthetic model.
// `vt profile decode`: where one decode step's GPU time went, per kernel, from CUPTI records of
// the running process (CUDA-graph launches included).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/commands.h"
#include "core/error.h"
#ifdef VT_WITH_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_ops.h"
#include "models/qwen3_5_cuda.h"
#include "profile/intent.h"
#include "profile/kernel_recorder.h"
#endif
#include <map>

namespace {

struct BenchArgs {
  std::string model, synthetic, weights = "fp8", batches = "1", predict, lm_head = "bf16";
  int64_t context = 1024, steps = 64;
  bool json = false, no_graph = false;
};

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    try {
      values.push_back(std::stoll(item));
    } catch (const std::exception&) {
      VT_FAIL("--batch: '", item, "' is not an integer");
    }
    VT_CHECK(values.back() > 0 && values.back() <= 1024, "--batch: ", values.back(), " out of range [1, 1024]");
  }
  VT_CHECK(!values.empty(), "--batch: empty list");
  return values;
}

#ifdef VT_WITH_CUDA
// The model a benchmark runs: a checkpoint folder or a synthetic model, BF16 activations, with
// random KV cache and GDN state (the contents do not change the work done).
std::unique_ptr<vt::Qwen35CudaModel> open_cuda_model(const BenchArgs& args, int64_t max_batch, std::string* name) {
  vt::CudaModelOptions options;
  options.activations = vt::DType::kBF16;
  options.max_sequences = max_batch;
  options.max_context = args.context + args.steps + 8;
  options.max_step_tokens = max_batch;
  VT_CHECK(args.lm_head == "bf16" || args.lm_head == "fp8", "--lm-head: expected bf16 or fp8, got '", args.lm_head, "'");
  options.fp8_lm_head = args.lm_head == "fp8";
  std::unique_ptr<vt::Qwen35CudaModel> model;
  if (!args.synthetic.empty()) {
    vt::Qwen35Config config = vt::synthetic_config(args.synthetic);
    VT_CHECK(args.weights == "fp8" || args.weights == "bf16", "--weights fp8|bf16");
    auto weights = vt::synthetic_cuda_weights(config, args.weights == "fp8", 1234);
    *name = args.synthetic + " (synthetic, " + args.weights + ")";
    model = std::make_unique<vt::Qwen35CudaModel>(std::move(config), std::move(weights), options, *name);
  } else {
    model = vt::load_qwen35_cuda(args.model, options);
    *name = args.model;
  }
  model->randomize_state(99);
  return model;
}

// Kernel name without parameters, namespaces or template arguments ("sm90_fp8_gemm_warp_rows").
std::string short_kernel_name(const std::string& name) {
  std::string text = name;
  for (size_t at; (at = text.find("(anonymous namespace)::")) != std::string::npos;) text.erase(at, 23);
  text = text.substr(0, text.find('('));
  if (text.rfind("void ", 0) == 0) text = text.substr(5);
  const size_t angle = text.find('<');
  if (angle != std::string::npos) text = text.substr(0, angle);
  const size_t colon = text.rfind("::");
  return colon == std::string::npos ? text : text.substr(colon + 2);
}

// The kernel-ran gate: one step's launches are recorded as intents (an ungraphed step runs the
// same launch sequence the graph captured), then `steps` graphed steps run under CUPTI. Every
// kernel vt meant to launch must have run exactly intended x steps times; otherwise this throws
// naming the kernel, the count expected and what ran.
void check_kernels_ran(vt::Qwen35CudaModel& model, std::vector<int32_t> tokens, const std::vector<int32_t>& positions,
                       bool use_graph) {
  std::vector<int32_t> next;
  vt::profile::begin_intents();
  model.decode_step(tokens, positions, &next, false);
  const auto intents = vt::profile::end_intents();
  VT_CHECK(!intents.empty(), "kernel-ran gate: the step recorded no intents");
  constexpr int kSteps = 3;
  vt::profile::KernelRecorder recorder;
  recorder.start();
  for (int step = 0; step < kSteps; ++step) model.decode_step(tokens, positions, &next, use_graph);
  const auto records = recorder.stop();
  std::map<std::string, int64_t> ran;
  for (const auto& record : records) ++ran[short_kernel_name(record.name)];
  for (const auto& [kernel, count] : intents) {
    const int64_t seen = ran.count(kernel) ? ran.at(kernel) : 0;
    if (seen == count * kSteps) continue;
    std::string what_ran;
    for (const auto& [name, n] : ran) what_ran += " " + name + " x" + std::to_string(n) + ";";
    VT_FAIL("kernel-ran gate: ", kernel, " was launched ", count, " times per step but ran ", seen, " times in ",
            kSteps, " steps. What ran:", what_ran);
  }
}

void run_profile_decode(const BenchArgs& args) {
  VT_CHECK(vt::cuda::device_count() > 0, "vt profile decode needs a CUDA GPU");
  VT_CHECK(args.model.empty() != args.synthetic.empty(), "give exactly one of --model or --synthetic");
  const std::vector<int64_t> batches = parse_list(args.batches);
  VT_CHECK(batches.size() == 1, "vt profile decode takes one --batch");
  const int64_t batch = batches[0];
  std::string name;
  auto model = open_cuda_model(args, batch, &name);
  std::vector<int32_t> tokens(batch), positions(batch, int32_t(args.context)), next;
  for (int64_t i = 0; i < batch; ++i) tokens[i] = int32_t((i * 7919 + 17) % model->config().vocab_size);
  for (int warm = 0; warm < 3; ++warm) model->decode_step(tokens, positions, &next, !args.no_graph);
  check_kernels_ran(*model, tokens, positions, !args.no_graph);

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

  struct Group {
    int64_t calls = 0;
    double total_us = 0;
    std::string grid;
  };
  std::map<std::string, Group> groups;
  double kernel_us = 0;
  int64_t from_graph = 0;
  for (const auto& record : records) {
    const std::string grid = std::to_string(record.grid[0]) + "x" + std::to_string(record.grid[1]) + "x" +
                             std::to_string(record.grid[2]);
    Group& group = groups[short_kernel_name(record.name) + " [" + grid + "]"];
    const double us = double(record.end_ns - record.start_ns) * 1e-3;
    group.calls += 1;
    group.total_us += us;
    kernel_us += us;
    from_graph += record.graph_node != 0;
  }
  std::vector<std::pair<std::string, Group>> sorted(groups.begin(), groups.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.total_us > b.second.total_us; });
  const double steps = double(args.steps), step_us = wall_us / steps;
  nlohmann::json report = {{"model", name}, {"batch", batch}, {"context", args.context}, {"steps", args.steps},
                           {"step_us", step_us}, {"kernel_us_per_step", kernel_us / steps},
                           {"kernels_per_step", double(records.size()) / steps},
                           {"graph_launched_fraction", double(from_graph) / double(records.size())},
                           {"idle_fraction", std::max(0.0, 1.0 - kernel_us / wall_us)}, {"kernels", nlohmann::json::array()}};
  for (const auto& [key, group] : sorted)
    report["kernels"].push_back({{"kernel", key}, {"calls_per_step", double(group.calls) / steps},
                                 {"us_per_step", group.total_us / steps}, {"share", group.total_us / wall_us}});
  if (args.json) {
    std::cout << report.dump(2) << std::endl;
    return;
  }
  std::printf("%s, batch %lld, context %lld: %.1f us/step wall, %.1f us/step in %0.f kernels (%.0f%% from graphs), "
              "GPU idle %.1f%%\n\n| kernel [grid] | calls/step | us/step | share of step |\n|---|---|---|---|\n",
              name.c_str(), (long long)batch, (long long)args.context, step_us, kernel_us / steps,
              double(records.size()) / steps, 100.0 * double(from_graph) / double(records.size()),
              100.0 * std::max(0.0, 1.0 - kernel_us / wall_us));
  for (const auto& [key, group] : sorted)
    std::printf("| %s | %.1f | %.1f | %.1f%% |\n", key.c_str(), double(group.calls) / steps, group.total_us / steps,
                100.0 * group.total_us / wall_us);
}

void run_bench_decode(const BenchArgs& args) {
  VT_CHECK(vt::cuda::device_count() > 0, "vt bench decode needs a CUDA GPU");
  VT_CHECK(args.model.empty() != args.synthetic.empty(), "give exactly one of --model or --synthetic");
  const std::vector<int64_t> batches = parse_list(args.batches);
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  VT_CHECK(args.context >= 1 && args.steps >= 1, "--context and --steps must be positive");

  const double bandwidth = vt::cuda::measure_read_bandwidth(size_t(4) << 30);  // GB/s
  std::string name;
  auto model = open_cuda_model(args, max_batch, &name);
  if (!args.predict.empty()) {
    std::ifstream in(args.predict);
    VT_CHECK(in, args.predict, ": cannot open prediction file");
  }

  nlohmann::json report = {{"model", name}, {"context", args.context}, {"bandwidth_gbps", bandwidth},
                           {"weight_bytes", model->weights().bytes()}, {"graphs", !args.no_graph}, {"rows", nlohmann::json::array()}};
  if (!args.json)
    std::printf("%s, context %lld, read bandwidth %.0f GB/s, weights %.2f GB\n\n| batch | ms/step | tok/s | floor ms | floor tok/s | of floor |\n|---|---|---|---|---|---|\n",
                name.c_str(), (long long)args.context, bandwidth, model->weights().bytes() / 1e9);
  for (int64_t batch : batches) {
    std::vector<int32_t> tokens(batch), positions(batch, int32_t(args.context)), next;
    for (int64_t i = 0; i < batch; ++i) tokens[i] = int32_t((i * 7919 + 17) % model->config().vocab_size);
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
    const double tokens_per_second = double(batch) * 1e3 / ms;
    check_kernels_ran(*model, tokens, positions, !args.no_graph);
    report["rows"].push_back({{"batch", batch}, {"ms_per_step", ms}, {"tokens_per_second", tokens_per_second},
                              {"floor_ms", floor_ms}, {"floor_fraction", floor_ms / ms}});
    if (!args.json)
      std::printf("| %lld | %.3f | %.1f | %.3f | %.1f | %.0f%% |\n", (long long)batch, ms, tokens_per_second, floor_ms,
                  double(batch) * 1e3 / floor_ms, 100.0 * floor_ms / ms);
  }
  if (args.json) std::cout << report.dump(2) << std::endl;
}
#endif

}  // namespace

namespace vt::apps {
namespace {

void add_decode_options(CLI::App* decode, BenchArgs& args, const char* batch_help, const char* steps_help) {
  decode->add_option("--model", args.model, "HF model folder");
  decode->add_option("--synthetic", args.synthetic, "qwen3.5-27b | qwen3.5-35b-a3b | qwen3-next-80b");
  decode->add_option("--weights", args.weights, "synthetic weights: fp8 (128x128 blocks) or bf16");
  decode->add_option("--batch", args.batches, batch_help);
  decode->add_option("--context", args.context, "tokens already in each sequence's cache");
  decode->add_option("--steps", args.steps, steps_help);
  decode->add_option("--lm-head", args.lm_head, "output layer: bf16 (as stored) or fp8 (128x128 blocks, quantised at load)");
  decode->add_flag("--no-graph", args.no_graph, "launch kernels one by one instead of a CUDA graph");
  decode->add_flag("--json", args.json, "print a JSON report");
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks on the GPU");
  bench->require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  auto* decode = bench->add_subcommand("decode", "Decode ms/step and tokens/s next to the bandwidth floor");
  add_decode_options(decode, *args, "comma-separated batch sizes, e.g. 1,16,64", "timed decode steps per batch size");
  decode->callback([args] {
#ifdef VT_WITH_CUDA
    run_bench_decode(*args);
#else
    VT_FAIL("vt bench decode: this vt was built without CUDA");
#endif
  });
}

void add_profile_commands(CLI::App& app) {
  auto* profile = app.add_subcommand("profile", "Where the GPU time went, from the running process");
  profile->require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  args->steps = 60;
  auto* decode = profile->add_subcommand("decode", "Per-kernel time of decode steps (CUPTI records)");
  add_decode_options(decode, *args, "batch size", "recorded decode steps");
  decode->callback([args] {
#ifdef VT_WITH_CUDA
    run_profile_decode(*args);
#else
    VT_FAIL("vt profile decode: this vt was built without CUDA");
#endif
  });
}

}  // namespace vt::apps
