// The `vt` command line. Scripted use depends on these contracts; keep them stable:
//   vt generate --model DIR --prompt-ids 1,2,3 --max-new-tokens N [--temperature 0] [--json]
//              [--logits-out FILE] [--device cpu|cuda]
//   vt inspect --model DIR
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/threading.h"
#include "engine/generate.h"
#include "io/weight_store.h"
#include "models/registry.h"

namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      VT_FAIL("--prompt-ids: '", item, "' is not an integer");
    }
    VT_CHECK(used == item.size() && value >= 0 && value <= INT32_MAX, "--prompt-ids: '", item,
             "' is not a valid token id");
    ids.push_back(int32_t(value));
  }
  VT_CHECK(!ids.empty(), "--prompt-ids: no ids given");
  return ids;
}

struct GenerateArgs {
  std::string model, prompt_ids, logits_out, device = "cpu", fp8_activations = "quantized";
  int64_t max_new_tokens = 16;
  vt::SamplingParams sampling;
  bool json = false;
};

int run_generate(const GenerateArgs& args) {
  if (args.device != "cpu")
    VT_FAIL("--device ", args.device, ": this build runs models on the CPU only (the CUDA model path is not built yet)");
  vt::LoadOptions load_options;
  load_options.fp8_activations =
      args.fp8_activations == "float" ? vt::Fp8Activations::kFloat : vt::Fp8Activations::kQuantized;
  auto model = vt::load_model(args.model, load_options);
  std::vector<int32_t> prompt = parse_ids(args.prompt_ids);

  vt::GenerateOptions options;
  options.max_new_tokens = args.max_new_tokens;
  options.sampling = args.sampling;
  options.keep_prompt_logits = !args.logits_out.empty();
  auto result = vt::generate(*model, prompt, options, [&](int32_t id) {
    if (!args.json) std::printf("%d ", id), std::fflush(stdout);
  });
  if (!args.logits_out.empty()) {
    std::ofstream out(args.logits_out, std::ios::binary);
    VT_CHECK(out, args.logits_out, ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(result.prompt_logits.data()),
              std::streamsize(result.prompt_logits.size() * sizeof(float)));
    VT_CHECK(out.good(), args.logits_out, ": write failed");
  }
  const double decode_rate = result.output_ids.size() > 1 && result.decode_seconds > 0
                                 ? double(result.output_ids.size() - 1) / result.decode_seconds
                                 : 0.0;
  if (args.json) {
    nlohmann::json output = {{"output_ids", result.output_ids},
                             {"prompt_tokens", prompt.size()},
                             {"prefill_seconds", result.prefill_seconds},
                             {"decode_tokens_per_second", decode_rate}};
    std::cout << output.dump() << std::endl;
  } else {
    std::printf("\n[%zu prompt tokens, prefill %.3f s, decode %.1f tok/s]\n", prompt.size(),
                result.prefill_seconds, decode_rate);
  }
  return 0;
}

int run_inspect(const std::string& dir) {
  auto model = vt::load_model(dir, {});
  std::cout << model->describe();
  auto store = vt::WeightStore::open(dir);
  std::cout << "tensors:\n";
  for (const auto& name : store.names()) {
    const auto& entry = store.entry(name);
    std::printf("  %-72s %-8s %-20s %12llu\n", name.c_str(), std::string(vt::dtype_name(entry.dtype)).c_str(),
                entry.shape.str().c_str(), (unsigned long long)(entry.end - entry.begin));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vt: inference engine for the Qwen3.5 / Qwen3-Next family"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "CPU threads (default: all cores, or VT_NUM_THREADS)");

  GenerateArgs generate_args;
  auto* generate = app.add_subcommand("generate", "Generate tokens from a prompt of token ids");
  generate->add_option("--model", generate_args.model, "HF model folder")->required();
  generate->add_option("--prompt-ids", generate_args.prompt_ids, "comma-separated token ids")->required();
  generate->add_option("--max-new-tokens", generate_args.max_new_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  generate->add_option("--temperature", generate_args.sampling.temperature, "0 = greedy");
  generate->add_option("--top-k", generate_args.sampling.top_k, "0 = off");
  generate->add_option("--top-p", generate_args.sampling.top_p, "nucleus mass");
  generate->add_option("--seed", generate_args.sampling.seed, "sampling seed");
  generate->add_flag("--json", generate_args.json, "print one JSON object");
  generate->add_option("--logits-out", generate_args.logits_out,
                       "write the last prompt position's logits (float32 LE, vocab values)");
  generate->add_option("--device", generate_args.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  generate->add_option("--fp8-activations", generate_args.fp8_activations,
                       "FP8 checkpoints: 'quantized' (W8A8 as on the GPU) or 'float' (weight-only)")
      ->check(CLI::IsMember({"quantized", "float"}));

  std::string inspect_model;
  auto* inspect = app.add_subcommand("inspect", "Print a model's config, layers and tensors");
  inspect->add_option("--model", inspect_model, "HF model folder")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help exits 0; any usage error exits 2 (runtime errors exit 1).
    return app.exit(error) == 0 ? 0 : 2;
  }
  try {
    if (threads > 0) vt::set_num_threads(threads);
    if (*generate) return run_generate(generate_args);
    if (*inspect) return run_inspect(inspect_model);
  } catch (const vt::Error& error) {
    std::fprintf(stderr, "vt: error: %s\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "vt: internal error: %s\n", error.what());
    return 2;
  }
  return 0;
}
