// `vt generate` and `vt inspect`: running and describing a model. Scripted use depends on these
// contracts; keep them stable:
//   vt generate --model DIR|FILE.gguf (--prompt-ids 1,2,3 | --prompt TEXT) --max-new-tokens N
//              [--temperature 0] [--json] [--logits-out FILE] [--device cpu|cuda]
//              [--speculative ngram|draft|mtp [--draft-model DIR|FILE.gguf] [--num-draft K]]
//   vt inspect --model DIR|FILE.gguf
// With --prompt the text is tokenized with the model's tokenizer and the output streamed as text.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/lm_head_options.h"
#include "apps/model_text.h"
#include "core/error.h"
#include "io/gguf.h"
#include "io/weight_store.h"
#include "model/generate.h"
#include "model/mtp_head.h"
#include "models/registry.h"
#include "speculative/draft_model_drafter.h"
#include "speculative/mtp_drafter.h"
#include "speculative/ngram_drafter.h"
#include "speculative/speculative.h"
#include "tokenizer/streaming_detokenizer.h"
#ifdef VT_WITH_CUDA
#include "runtime/qwen3_5_cuda.h"
#endif

namespace {

struct GenerateArgs {
  std::string model, prompt_ids, prompt, logits_out, device = "cpu", fp8_activations = "quantized", activations = "bf16";
  std::string synthetic, weights = "fp8";  // --synthetic: vt serve --synthetic's model (random weights, seed 1)
  int64_t max_new_tokens = 16;
  vt::SamplingParams sampling;
  bool json = false;
  std::string speculative, draft_model;  // speculative: "", "ngram", "draft" or "mtp"
  int64_t num_draft = 4;
  bool adaptive_draft = false;
  bool batch_invariant = false;
  vt::apps::LmHeadArgs lm_head;
};

nlohmann::json speculative_json(const vt::SpeculativeStats& stats, const std::string& drafter) {
  std::vector<double> acceptance_by_position;
  for (size_t i = 0; i < stats.drafted_at.size(); ++i)
    acceptance_by_position.push_back(stats.drafted_at[i] ? double(stats.accepted_at[i]) / double(stats.drafted_at[i]) : 0.0);
  return {{"drafter", drafter},
          {"num_draft", stats.num_draft},
          {"steps", stats.steps},
          {"steps_without_draft", stats.steps_without_draft},
          {"drafted", stats.drafted},
          {"accepted", stats.accepted},
          {"acceptance_rate", stats.acceptance_rate()},
          {"tokens_per_step", stats.tokens_per_step()},
          {"accepted_histogram", stats.accepted_histogram},
          {"drafted_by_position", stats.drafted_at},
          {"accepted_by_position", stats.accepted_at},
          {"acceptance_by_position", acceptance_by_position}};
}

std::unique_ptr<vt::Model> open_model(const GenerateArgs& args, [[maybe_unused]] int64_t context) {
  VT_CHECK(!args.batch_invariant || args.device == "cuda" || !args.synthetic.empty(),
           "--batch-invariant is a CUDA option (--device cuda)");
  if (args.device == "cuda" || !args.synthetic.empty()) {
#ifdef VT_WITH_CUDA
    VT_CHECK(args.fp8_activations == "quantized", "--device cuda runs FP8 weights W8A8 only");
    vt::CudaModelOptions options;
    options.activations = args.activations == "f32" ? vt::DType::kF32 : vt::DType::kBF16;
    options.max_context = context;
    options.max_step_tokens = std::min<int64_t>(context, 2048);
    if (!args.speculative.empty()) {  // verify steps of the last token + k drafts, rolled back
      options.max_rollback_tokens = args.num_draft + 1;
      options.max_logit_rows = args.num_draft + 1;
    }
    options.load_mtp = args.speculative == "mtp";
    options.batch_invariant = args.batch_invariant;
    if (const auto quantization = vt::apps::lm_head_quantization(args.lm_head)) {
      options.fp8_lm_head = true;
      options.lm_head_exact_columns = quantization->exact_columns;
    }
    // The same weights as `vt serve --synthetic` (its seed), so their greedy tokens can be compared.
    if (!args.synthetic.empty()) return vt::make_synthetic_cuda_model(args.synthetic, args.weights, options, 1);
    return vt::load_qwen35_cuda(args.model, options);
#else
    VT_FAIL("--device cuda / --synthetic: this vt was built without CUDA");
#endif
  }
  vt::LoadOptions load_options;
  load_options.load_mtp = args.speculative == "mtp";
  load_options.fp8_activations =
      args.fp8_activations == "float" ? vt::Fp8Activations::kFloat : vt::Fp8Activations::kQuantized;
  const auto lm_head = vt::apps::lm_head_quantization(args.lm_head);  // bad flags refused before loading
  auto model = vt::apps::load_model_with_progress(args.model, load_options);
  if (lm_head) model->quantize_lm_head_fp8(*lm_head);
  return model;
}

void run_generate(const GenerateArgs& args) {
  VT_CHECK(args.prompt_ids.empty() != args.prompt.empty(), "generate: give exactly one of --prompt-ids and --prompt");
  VT_CHECK(args.model.empty() != args.synthetic.empty(), "generate: give --model or --synthetic (one of them)");
  VT_CHECK(args.synthetic.empty() || args.prompt.empty(), "generate --synthetic: a random model has no tokenizer; "
           "give --prompt-ids");
  VT_CHECK(args.synthetic.empty() || args.speculative.empty() || args.speculative == "ngram",
           "generate --synthetic: --speculative ", args.speculative, " needs a checkpoint");
  // A text prompt brings the model's tokenizer: ids in, text streamed out, stop at end of sequence.
  std::optional<vt::apps::ModelText> text;
  std::vector<int32_t> prompt;
  if (!args.prompt.empty()) {
    text = vt::apps::load_model_text(args.model);
    prompt = text->tokenizer->encode(args.prompt);
    VT_CHECK(!prompt.empty(), "--prompt: the text gives no tokens");
  } else {
    prompt = vt::apps::parse_prompt_ids(args.prompt_ids);
  }
  auto model = open_model(args, int64_t(prompt.size()) + std::max<int64_t>(args.max_new_tokens, 1));

  vt::GenerateOptions options;
  options.max_new_tokens = args.max_new_tokens;
  options.sampling = args.sampling;
  options.keep_prompt_logits = !args.logits_out.empty();
  std::optional<vt::StreamingDetokenizer> detokenizer;
  std::string output_text;
  if (text) {
    options.stop_token_ids = text->stop_ids;
    detokenizer.emplace(*text->tokenizer, /*skip_special_tokens=*/true);
    if (!args.json) std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
  }
  auto on_token = [&](int32_t id) {
    if (detokenizer) {
      const std::string piece = detokenizer->push(id);
      output_text += piece;
      if (!args.json) std::fwrite(piece.data(), 1, piece.size(), stdout), std::fflush(stdout);
    } else if (!args.json) {
      std::printf("%d ", id), std::fflush(stdout);
    }
  };
  // Speculative decoding: a drafter proposes, the model verifies --num-draft tokens per step.
  VT_CHECK((args.speculative == "draft") == !args.draft_model.empty(),
           "--draft-model goes with --speculative draft, and it needs one");
  std::unique_ptr<vt::Model> draft_model;
  std::unique_ptr<vt::Drafter> drafter;
  if (args.speculative == "ngram") drafter = std::make_unique<vt::NgramDrafter>();
  if (args.speculative == "draft") {
    draft_model = vt::load_model(args.draft_model, {});
    VT_CHECK(draft_model->info().vocab_size == model->info().vocab_size, "--draft-model: vocabulary of ",
             draft_model->info().vocab_size, " tokens, the model has ", model->info().vocab_size);
    vt::SamplingParams draft_sampling = args.sampling;
    draft_sampling.seed = args.sampling.seed + 1;
    drafter = std::make_unique<vt::DraftModelDrafter>(*draft_model, draft_sampling);
  }
  if (args.speculative == "mtp") {
    auto* head = dynamic_cast<vt::MtpHead*>(model.get());
    VT_CHECK(head, "--speculative mtp: runs on the Qwen3.5 family (not ", model->info().architecture, ")");
    vt::SamplingParams draft_sampling = args.sampling;
    draft_sampling.seed = args.sampling.seed + 1;
    drafter = std::make_unique<vt::MtpDrafter>(*head, draft_sampling);
  }
  vt::SpeculativeResult result;
  if (drafter) {
    vt::SpeculativeOptions speculative;
    speculative.num_draft = args.num_draft;
    speculative.adaptive = args.adaptive_draft;
    result = vt::generate_speculative(*model, *drafter, prompt, options, speculative, on_token);
  } else {
    static_cast<vt::GenerateResult&>(result) = vt::generate(*model, prompt, options, on_token);
  }
  if (detokenizer) {
    const std::string rest = detokenizer->finish();
    output_text += rest;
    if (!args.json) std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
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
    if (text) output["text"] = output_text;
    if (drafter) output["speculative"] = speculative_json(result.stats, drafter->name());
    std::cout << output.dump() << std::endl;
  } else {
    std::printf("\n[%zu prompt tokens, prefill %.3f s, decode %.1f tok/s]\n", prompt.size(),
                result.prefill_seconds, decode_rate);
    if (drafter)
      std::printf("[speculative %s, k %lld: %.2f tokens/step over %lld steps, %lld of %lld drafts accepted]\n",
                  drafter->name().c_str(), (long long)args.num_draft, result.stats.tokens_per_step(),
                  (long long)result.stats.steps, (long long)result.stats.accepted, (long long)result.stats.drafted);
  }
}

void run_inspect(const std::string& dir) {
  auto model = vt::load_model(dir, {});
  std::cout << model->describe();
  if (vt::is_gguf_path(dir)) {
    vt::GgufFile file(dir);
    std::cout << "tensors:\n";
    for (const auto& tensor : file.header().tensors)
      std::printf("  %-72s %-8s %-20s %12llu\n", tensor.name.c_str(), std::string(vt::ggml_type_info(tensor.type).name).c_str(),
                  tensor.shape.str().c_str(), (unsigned long long)tensor.bytes);
    return;
  }
  auto store = vt::WeightStore::open(dir);
  std::cout << "tensors:\n";
  for (const auto& name : store.names()) {
    const auto& entry = store.entry(name);
    std::printf("  %-72s %-8s %-20s %12llu\n", name.c_str(), std::string(vt::dtype_name(entry.dtype)).c_str(),
                entry.shape.str().c_str(), (unsigned long long)(entry.end - entry.begin));
  }
}

}  // namespace

namespace vt::apps {

void add_model_commands(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* generate = app.add_subcommand("generate", "Generate tokens from a prompt of token ids");
  generate->add_option("--model", args->model, "HF model folder or GGUF file");
  generate->add_option("--synthetic", args->synthetic,
                       "CUDA: qwen3.5-27b | qwen3.5-35b-a3b | qwen3-next-80b with vt serve --synthetic's random weights "
                       "(--prompt-ids)");
  generate->add_option("--weights", args->weights, "--synthetic weights: fp8 (128x128 blocks, default) or bf16")
      ->check(CLI::IsMember({"fp8", "bf16"}));
  auto* ids_option = generate->add_option("--prompt-ids", args->prompt_ids, "comma-separated token ids");
  generate->add_option("--prompt", args->prompt, "prompt text (tokenized with the model's tokenizer)")->excludes(ids_option);
  generate->add_option("--max-new-tokens", args->max_new_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  generate->add_option("--temperature", args->sampling.temperature, "0 = greedy");
  generate->add_option("--top-k", args->sampling.top_k, "0 = off");
  generate->add_option("--top-p", args->sampling.top_p, "nucleus mass");
  generate->add_option("--seed", args->sampling.seed, "sampling seed");
  generate->add_flag("--json", args->json, "print one JSON object");
  generate->add_option("--logits-out", args->logits_out,
                       "write the last prompt position's logits (float32 LE, vocab values)");
  generate->add_option("--device", args->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  vt::apps::add_lm_head_options(generate, args->lm_head);
  generate->add_flag("--batch-invariant", args->batch_invariant,
                     "CUDA, models without experts: the kernels vt serve --batch-invariant runs, so the tokens equal its");
  generate->add_option("--activations", args->activations, "CUDA activation dtype: bf16 (default) or f32")
      ->check(CLI::IsMember({"bf16", "f32"}));
  generate->add_option("--fp8-activations", args->fp8_activations,
                       "FP8 checkpoints: 'quantized' (W8A8 as on the GPU) or 'float' (weight-only)")
      ->check(CLI::IsMember({"quantized", "float"}));
  generate->add_option("--speculative", args->speculative, "speculative decoding: ngram (prompt lookup), draft (--draft-model) or mtp (the checkpoint's MTP head)")
      ->check(CLI::IsMember({"ngram", "draft", "mtp"}));
  generate->add_option("--draft-model", args->draft_model, "draft model (HF folder or GGUF) for --speculative draft");
  generate->add_option("--num-draft", args->num_draft, "drafted tokens verified per step (k)")->check(CLI::Range(1, 64));
  generate->add_flag("--adaptive-draft", args->adaptive_draft, "adapt k in [1, --num-draft] to the acceptance");
  generate->callback([args] { run_generate(*args); });

  auto model_dir = std::make_shared<std::string>();
  auto* inspect = app.add_subcommand("inspect", "Print a model's config, layers and tensors");
  inspect->add_option("--model", *model_dir, "HF model folder or GGUF file")->required();
  inspect->callback([model_dir] { run_inspect(*model_dir); });
}

}  // namespace vt::apps
