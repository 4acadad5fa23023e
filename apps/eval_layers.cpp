// `vt eval layers`: where two runs of one checkpoint part, layer by layer. The same prompt through
// two configurations (a and b: the CPU reference, W8A8 as the GPU runs FP8 or weight-only; the
// CUDA model with bf16 activations, the served configuration, or f32), the models' named
// activations tapped (Model::set_tap: "embed", per layer "gdn_out" and "layer_out", the residual
// stream after the layer), each compared: b's relative L2 distance from a, its largest absolute
// difference, a's RMS; then the last token's logits. The first tap past --threshold is named.
//   vt eval layers --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--a cpu] [--b cuda]
//                  [--threshold 1e-2] [--json]
// Sides: cpu (FP8 checkpoints W8A8 as on the GPU), cpu:weight-only, cuda (bf16 activations,
// tuned GEMM plan: as `vt serve` runs), cuda:f32.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "apps/commands.h"
#include "apps/model_text.h"
#include "core/error.h"
#include "model/model.h"
#ifdef VT_WITH_CUDA
#include "runtime/qwen3_5_cuda.h"
#endif

namespace {

struct LayersArgs {
  std::string model, prompt, prompt_ids, a = "cpu", b = "cuda";
  double threshold = 1e-2;
  bool json = false;
};

// One side's taps, in the order they came, each the concatenation of its calls' rows (a CUDA
// forward longer than a step taps once per step), and its last-token logits.
struct Run {
  std::vector<std::pair<std::string, int>> order;
  std::map<std::pair<std::string, int>, std::vector<float>> taps;
  std::vector<float> logits;
};

std::unique_ptr<vt::Model> open_side(const std::string& side, const std::string& model, int64_t tokens) {
  if (side == "cpu" || side == "cpu:weight-only") {
    vt::LoadOptions options;
    options.fp8_activations = side == "cpu" ? vt::Fp8Activations::kQuantized : vt::Fp8Activations::kFloat;
    return vt::apps::load_model_with_progress(model, options);
  }
  VT_CHECK(side == "cuda" || side == "cuda:f32", "eval layers: a side is cpu, cpu:weight-only, cuda or cuda:f32, got '",
           side, "'");
#ifdef VT_WITH_CUDA
  vt::CudaModelOptions options;
  options.activations = side == "cuda" ? vt::DType::kBF16 : vt::DType::kF32;
  options.max_context = tokens;
  options.max_step_tokens = tokens;  // one step: every tap holds the whole prompt's rows
  return vt::load_qwen35_cuda(model, options);
#else
  (void)tokens;
  VT_FAIL("eval layers: ", side, " needs a CUDA build of vt");
#endif
}

Run run_side(const std::string& side, const std::string& model, const std::vector<int32_t>& ids) {
  auto loaded = open_side(side, model, int64_t(ids.size()));
  Run run;
  loaded->set_tap([&run](const std::string& name, int layer, const vt::TensorView& tensor) {
    VT_CHECK(tensor.dtype == vt::DType::kF32 && tensor.device == vt::Device::kCpu, "eval layers: tap ", name,
             " is not host f32");
    const auto key = std::make_pair(name, layer);
    auto [it, fresh] = run.taps.try_emplace(key);
    if (fresh) run.order.push_back(key);
    it->second.insert(it->second.end(), tensor.f32(), tensor.f32() + tensor.numel());
  });
  auto sequence = loaded->new_sequence(int64_t(ids.size()));
  const int64_t vocab = loaded->info().vocab_size;
  vt::Buffer logits(vt::DType::kF32, {1, vocab});
  loaded->forward(ids, *sequence, logits, {});
  loaded->set_tap(nullptr);
  run.logits.assign(logits.f32(), logits.f32() + vocab);
  return run;
}

struct Distance {
  double relative_l2 = 0, max_abs = 0, rms = 0;
};

Distance distance(const std::vector<float>& a, const std::vector<float>& b) {
  VT_CHECK(a.size() == b.size(), "eval layers: ", a.size(), " vs ", b.size(), " values");
  double diff = 0, norm = 0;
  Distance d;
  for (size_t i = 0; i < a.size(); ++i) {
    const double delta = double(b[i]) - double(a[i]);
    diff += delta * delta;
    norm += double(a[i]) * double(a[i]);
    d.max_abs = std::max(d.max_abs, std::abs(delta));
  }
  d.relative_l2 = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  d.rms = a.empty() ? 0 : std::sqrt(norm / double(a.size()));
  return d;
}

void run_layers(const LayersArgs& args) {
  VT_CHECK(args.prompt.empty() != args.prompt_ids.empty(), "eval layers: give exactly one of --prompt and --prompt-ids");
  std::vector<int32_t> ids;
  if (!args.prompt.empty()) {
    ids = vt::apps::load_model_text(args.model).tokenizer->encode(args.prompt);
  } else {
    ids = vt::apps::parse_prompt_ids(args.prompt_ids);
  }
  VT_CHECK(!ids.empty(), "eval layers: the prompt has no tokens");
  const Run a = run_side(args.a, args.model, ids);
  const Run b = run_side(args.b, args.model, ids);

  nlohmann::json rows = nlohmann::json::array();
  std::string first_past;
  for (const auto& key : a.order) {
    const auto other = b.taps.find(key);
    if (other == b.taps.end()) continue;  // a tap only one side has
    const Distance d = distance(a.taps.at(key), other->second);
    rows.push_back({{"tap", key.first}, {"layer", key.second}, {"relative_l2", d.relative_l2},
                    {"max_abs", d.max_abs}, {"rms", d.rms}});
    if (first_past.empty() && d.relative_l2 > args.threshold)
      first_past = key.first + " of layer " + std::to_string(key.second);
  }
  const Distance logits = distance(a.logits, b.logits);
  const auto argmax = [](const std::vector<float>& v) { return int64_t(std::max_element(v.begin(), v.end()) - v.begin()); };
  nlohmann::json report = {{"model", args.model}, {"a", args.a}, {"b", args.b}, {"tokens", ids.size()},
                           {"threshold", args.threshold}, {"rows", rows},
                           {"logits", {{"relative_l2", logits.relative_l2}, {"max_abs", logits.max_abs},
                                       {"argmax_a", argmax(a.logits)}, {"argmax_b", argmax(b.logits)}}},
                           {"first_past_threshold", first_past}};
  if (args.json) {
    std::cout << report.dump(1) << std::endl;
    return;
  }
  std::printf("%s, %zu tokens: %s (b) against %s (a)\n\n| layer | tap | rel L2 | max abs | rms (a) |\n|---|---|---|---|---|\n",
              args.model.c_str(), ids.size(), args.b.c_str(), args.a.c_str());
  for (const auto& row : rows)
    std::printf("| %d | %s | %.3g | %.3g | %.3g |\n", row["layer"].get<int>(), row["tap"].get<std::string>().c_str(),
                row["relative_l2"].get<double>(), row["max_abs"].get<double>(), row["rms"].get<double>());
  std::printf("| - | logits (last token) | %.3g | %.3g | argmax %lld vs %lld |\n", logits.relative_l2, logits.max_abs,
              (long long)argmax(a.logits), (long long)argmax(b.logits));
  std::printf("\nfirst past %.3g: %s\n", args.threshold, first_past.empty() ? "none" : first_past.c_str());
}

}  // namespace

namespace vt::apps {

void add_eval_layers_command(CLI::App& eval) {
  auto args = std::make_shared<LayersArgs>();
  auto* layers = eval.add_subcommand("layers", "Where two configurations of one model part, layer by layer");
  layers->add_option("--model", args->model, "HF model folder (Qwen3.5 family)")->required();
  layers->add_option("--prompt", args->prompt, "prompt text (the model's tokenizer, no chat template)");
  layers->add_option("--prompt-ids", args->prompt_ids, "comma-separated token ids");
  layers->add_option("--a", args->a, "the reference side: cpu (default), cpu:weight-only, cuda, cuda:f32");
  layers->add_option("--b", args->b, "the side compared with it (default cuda)");
  layers->add_option("--threshold", args->threshold, "relative L2 past which a tap is named (default 1e-2)")
      ->check(CLI::PositiveNumber);
  layers->add_flag("--json", args->json, "print one JSON object");
  layers->callback([args] { run_layers(*args); });
}

}  // namespace vt::apps
