// `vt bench prefill`: prompt tokens/s, the chunked GDN delta rule against the token-by-token one
// in the same run, with the GDN kernels' share of the time and each part's MFU (CUPTI and the
// launches' intents, against the measured GEMM peaks); and the benchmark model that the decode and
// prefill benches open.
#include "apps/bench_model.h"

#ifdef VT_WITH_CUDA
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>

#include "apps/cli_lists.h"
#include "core/error.h"
#include "cuda/device.h"
#include "engine/cuda_serving.h"
#include "models/registry.h"
#include "ops/attention/attention.h"
#include "ops/gemm/gemm.h"
#include "profile/kernel_recorder.h"
#include "profile/step_report.h"
#include "trace/intent.h"

namespace vt::apps {

// The options a benchmark model is built with (BF16 activations, room for the batches and steps).
vt::CudaModelOptions bench_model_options(const BenchArgs& args, const std::vector<int64_t>& batches) {
  VT_CHECK(args.model.empty() != args.synthetic.empty(), "give exactly one of --model or --synthetic");
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  vt::CudaModelOptions options;
  options.activations = vt::DType::kBF16;
  options.max_sequences = max_batch;
  options.max_context = args.context + args.steps + 8;
  options.max_step_tokens = max_batch;
  if (!args.gemm_exclude.empty()) {
    std::stringstream list(args.gemm_exclude);
    for (std::string item; std::getline(list, item, ',');)
      if (!item.empty()) options.gemm_exclude.push_back(item);
  }
  if (const auto quantization = vt::apps::lm_head_quantization(args.lm_head)) {
    options.fp8_lm_head = true;
    options.lm_head_exact_columns = quantization->exact_columns;
  }
  return options;
}

vt::Qwen35Config bench_config(const BenchArgs& args) {
  return args.synthetic.empty() ? vt::parse_qwen35_config(args.model + "/config.json")
                                : vt::synthetic_config(args.synthetic);
}

// A benchmark's model on one GPU, built with `options`: --synthetic (the real shapes, random
// weights) or --model DIR; `name` is what the report calls it.
std::unique_ptr<vt::Qwen35CudaModel> make_bench_model(const BenchArgs& args, const vt::CudaModelOptions& options,
                                                      std::string* name) {
  if (!args.synthetic.empty()) {
    auto model = vt::make_synthetic_cuda_model(args.synthetic, args.weights, options, 1234);
    *name = model->describe();
    return model;
  }
  *name = args.model;
  return vt::load_qwen35_cuda(args.model, options);
}

// `vt bench prefill`: one sequence's prompt of N tokens through Model::forward (steps of
// --step-tokens), timed from a fresh sequence to its last-token logits on the host; per N the
// chunked delta rule (gdn_chunked) and the token-by-token one (gdn_recurrent), so the speedup is
// measured in one run. The GDN share: the
// GPU time of the sm90_gdn_* kernels (conv, recurrent, chunked) in one more run under CUPTI, over
// that run's wall time.
void run_bench_prefill_cuda(const BenchArgs& args) {
  VT_CHECK(vt::cuda::device_count() > 0, "vt bench prefill needs a CUDA GPU");
  const std::vector<int64_t> lengths = vt::apps::parse_int_list(args.prompt_tokens, "--tokens", 1, int64_t(1) << 20);
  VT_CHECK(args.step_tokens >= 1 && args.repeats >= 1, "--step-tokens and --repeats must be positive");
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  VT_CHECK(args.max_running >= 1 && args.prefill_chunk >= 1 && args.kernels >= 0 && args.prompt_chunks_per_step >= 0,
           "--max-running and --prefill-chunk must be positive, --kernels and --prompt-chunks-per-step >= 0");
  vt::CudaModelOptions options = bench_model_options(args, {args.max_running});
  options.max_context = args.max_context > 0 ? args.max_context : longest + args.decode_after + 8;
  options.prefill_attention = args.prefill_attention == "flashinfer";
  VT_CHECK(options.max_context > longest, "--max-context ", options.max_context, " must exceed the longest prompt");
  VT_CHECK(args.prompts >= 1 && args.decoding >= 0 && args.prompts + args.decoding <= args.max_running,
           "--prompts + --decoding must be at most --max-running");
  // The engine path's consecutive chunks of one prompt per step: vt serve's on a GPU unless given.
  vt::EngineOptions serving;
  serving.prefill_chunk = args.prefill_chunk;
  serving.step_token_budget = vt::cuda_step_token_budget(args.prefill_chunk, args.max_running);
  const int64_t chunks_per_step = args.prompt_chunks_per_step > 0
                                      ? args.prompt_chunks_per_step
                                      : vt::serving_prompt_chunks_per_step(serving, /*batch_invariant=*/false);
  // The engine path's prompt tokens per step: the step's budget (--step-tokens) less the decode
  // tokens, at least one step's chunks.
  const int64_t prompt_budget = std::max(std::min(chunks_per_step * args.prefill_chunk, longest),
                                         (args.prompts > 1 ? args.step_tokens : 0) - args.decoding);
  options.max_step_tokens = std::max({std::min(args.step_tokens, longest), args.max_running,
                                      prompt_budget + args.decoding});
  const vt::Qwen35Config config = bench_config(args);
  // The header names the attention that runs: a build without FlashInfer's headers (or a shape it
  // does not serve) would run every prompt token on the paged decode kernel instead, ~15x slower.
  if (options.prefill_attention) {
    const vt::cuda::AttentionShape shape{config.num_heads, config.num_kv_heads, config.head_dim, config.rotary_dim,
                                         options.block_size, config.rope, config.rms_norm_eps};
    VT_CHECK(vt::cuda::prefill_attention_supports(shape, options.activations),
             "--prefill-attention flashinfer: this build has no FlashInfer prefill attention for this model "
             "(configured without FlashInfer's headers, or not bf16 at head dim 256); pass --prefill-attention paged");
  }
  std::string name;
  std::unique_ptr<vt::Qwen35CudaModel> model = make_bench_model(args, options, &name);
  const int64_t vocab = model->config().vocab_size;
  // The engine path's mixed steps: --decoding other sequences, each prefilled to --context, add
  // one decode token to every step (their tokens do not matter to the work).
  std::vector<std::unique_ptr<vt::SequenceState>> decoders;
  std::vector<int32_t> decoder_prompt(size_t(args.context));
  for (int64_t i = 0; i < args.context; ++i) decoder_prompt[size_t(i)] = first_token(i + 3, vocab);
  for (int64_t d = 0; d < args.decoding; ++d) {
    decoders.push_back(model->new_sequence(options.max_context));
    vt::Buffer decoder_logits(vt::DType::kF32, {1, vocab});
    model->forward(decoder_prompt, *decoders.back(), decoder_logits, {});
  }
  // chunked / token-by-token: Model::forward with the delta rule forced; engine: as the serving
  // engine feeds a prompt, forward_batch of up to chunks_per_step --prefill-chunk chunks at a time,
  // the delta rule chosen by the step (kAuto).
  const std::map<std::string, vt::DeltaRuleChoice> known_paths = {{"chunked", vt::DeltaRuleChoice::kChunked},
                                                                  {"token-by-token", vt::DeltaRuleChoice::kRecurrent},
                                                                  {"engine", vt::DeltaRuleChoice::kAuto}};
  std::vector<std::pair<std::string, vt::DeltaRuleChoice>> paths;
  {
    std::stringstream list(args.prefill_paths);
    for (std::string item; std::getline(list, item, ',');) {
      const auto known = known_paths.find(item);
      VT_CHECK(known != known_paths.end(), "--paths: '", item, "' is not chunked, token-by-token or engine");
      paths.emplace_back(*known);
    }
  }
  VT_CHECK(!paths.empty(), "--paths: give at least one path");
  VT_CHECK(args.decode_after >= 0, "--decode-after must be >= 0");
  // MFU's ceilings, measured on this device before the model's work: cuBLASLt at 8192^3.
  const double bf16_peak = vt::cuda::measure_gemm_peak_tflops(vt::DType::kBF16);
  const bool fp8_weights = args.synthetic.empty() ? config.fp8.has_value() : args.weights == "fp8";
  const double gemm_peak = fp8_weights ? vt::cuda::measure_gemm_peak_tflops(vt::DType::kF8E4M3) : bf16_peak;
  nlohmann::json report = {{"model", name},
                           {"device", "cuda"},
                           {"step_tokens", options.max_step_tokens},
                           {"prompt_chunks_per_step", chunks_per_step},
                           {"prefill_attention", args.prefill_attention},
                           {"repeats", args.repeats},
                           {"peak_tflops", {{"gemm", gemm_peak}, {"bf16", bf16_peak}}},
                           {"rows", nlohmann::json::array()}};
  if (!args.json) {
    std::printf("%s, prompt prefill in steps of %lld tokens (engine path: chunks of %lld, up to %lld a step), %s "
                "prefill attention, median of %lld runs; measured peaks (cuBLASLt 8192^3): GEMM %.0f TFLOP/s, bf16 "
                "%.0f TFLOP/s\n\n",
                name.c_str(), (long long)options.max_step_tokens, (long long)args.prefill_chunk,
                (long long)chunks_per_step, args.prefill_attention.c_str(), (long long)args.repeats, gemm_peak,
                bf16_peak);
    std::printf("| tokens | GDN delta rule | ms | tok/s | GDN kernels ms | GDN share | speedup |\n"
                "|---|---|---|---|---|---|---|\n");
    std::fflush(stdout);
  }
  vt::Buffer logits(vt::DType::kF32, {1, vocab}), step_logits(vt::DType::kF32, {args.prompts + args.decoding, vocab});
  nlohmann::json top_kernels = nlohmann::json::array();
  for (int64_t length : lengths) {
    std::vector<int32_t> prompt(static_cast<size_t>(length));
    for (int64_t i = 0; i < length; ++i) prompt[size_t(i)] = first_token(i, vocab);
    std::vector<double> path_ms;
    for (const auto& [path, choice] : paths) {
      vt::ForwardOptions forward_options;
      forward_options.delta_rule = choice;
      const bool engine_path = path == "engine";
      // One prefill of the first `tokens` prompt tokens from a fresh (zeroed) sequence; the zeroing
      // is not timed. `decode_ms`: per token of --decode-after decode steps after it (chunked path).
      double decode_ms = 0;
      const auto run_once = [&](int64_t tokens, bool decode) {
        auto state = model->new_sequence(length + std::max<int64_t>(1, args.decode_after));
        std::vector<std::unique_ptr<vt::SequenceState>> others;  // --prompts beyond the first
        for (int64_t p = 1; engine_path && p < args.prompts; ++p) others.push_back(model->new_sequence(length + 1));
        const std::span<const int32_t> tokens_in = std::span<const int32_t>(prompt).first(size_t(tokens));
        vt::cuda::synchronize();
        const auto start = std::chrono::steady_clock::now();
        if (engine_path) {
          // As the engine packs a step (Engine::schedule): each prompt's next chunk, in order,
          // while the step's prompt budget holds it, then (in a step without decoding sequences)
          // each one's chunks after it, up to chunks_per_step a prompt, that the budget holds; then
          // one token of every decoding sequence.
          std::vector<vt::SequenceState*> prompts{state.get()};
          for (auto& other : others) prompts.push_back(other.get());
          std::vector<vt::BatchItem> items;
          std::vector<std::pair<vt::SequenceState*, int64_t>> fed;  // a prompt and its tokens this step
          for (size_t first = 0; first < prompts.size();) {
            items.clear();
            fed.clear();
            int64_t budget = prompt_budget;
            for (size_t p = first; p < prompts.size() && budget > 0; ++p) {
              const int64_t begin = prompts[p]->length();
              if (begin >= tokens) continue;
              const int64_t count = std::min({args.prefill_chunk, tokens - begin, budget});
              if (count < std::min(args.prefill_chunk, tokens - begin) && !fed.empty()) break;
              fed.push_back({prompts[p], count});
              budget -= count;
            }
            for (auto& [prompt_state, count] : fed) {
              const int64_t begin = prompt_state->length();
              for (int64_t chunks = 1; decoders.empty() && chunks < chunks_per_step && begin + count < tokens;
                   ++chunks) {
                const int64_t next = std::min(args.prefill_chunk, tokens - begin - count);
                if (next > budget) break;
                count += next;
                budget -= next;
              }
              items.push_back({tokens_in.subspan(size_t(begin), size_t(count)), prompt_state});
            }
            for (auto& decoder : decoders)
              if (decoder->length() < decoder->capacity()) items.push_back({std::span<const int32_t>(prompt).first(1), decoder.get()});
            model->forward_batch(items, step_logits.view().rows(0, int64_t(items.size())));
            while (first < prompts.size() && prompts[first]->length() >= tokens) ++first;
          }
        } else {
          model->forward(tokens_in, *state, logits, forward_options);
        }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (decode && args.decode_after > 0) {
          const auto decode_start = std::chrono::steady_clock::now();
          for (int64_t d = 0; d < args.decode_after; ++d)
            model->forward(std::span<const int32_t>(prompt).first(1), *state, logits, {});
          decode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - decode_start).count() /
                      double(args.decode_after);
        }
        return ms;
      };
      // Warm-up (lazy module loads, cuBLASLt plans): two steps' worth of the prompt cover every
      // kernel and shape a longer one runs.
      run_once(std::min(length, 2 * options.max_step_tokens), false);
      std::vector<double> times;
      for (int64_t r = 0; r < args.repeats; ++r) times.push_back(run_once(length, path == "chunked"));
      std::sort(times.begin(), times.end());
      const double ms = times[times.size() / 2];
      // Progress before the profiled run (a long prompt's runs take minutes each).
      std::fprintf(stderr, "bench prefill: %lld tokens, %s: %.1f ms (%.0f tok/s)", (long long)length, path.c_str(), ms,
                   double(length * (engine_path ? args.prompts : 1)) * 1e3 / ms);
      if (path == "chunked" && args.decode_after > 0) std::fprintf(stderr, ", then %.2f ms per decoded token", decode_ms);
      std::fprintf(stderr, "\n");
      // One more run under CUPTI with its launches' intents: kernel times, the GDN share, MFU.
      vt::profile::KernelRecorder recorder;
      vt::trace::begin_intents();
      recorder.start();
      const double profiled_ms = run_once(length, false);
      const std::vector<vt::profile::KernelRecord> records = recorder.stop();
      const std::vector<vt::trace::Intent> intents = vt::trace::end_intent_records();
      const vt::profile::StepReport step_report = vt::profile::build_step_report(
          vt::profile::spans_from_kernels(records, intents), {1, profiled_ms * 1e3, 0.0});
      nlohmann::json parts = nlohmann::json::array();
      for (const auto& part : vt::profile::part_utilisation(step_report, gemm_peak, bf16_peak))
        parts.push_back({{"part", part.part},
                         {"ms", part.us_per_step / 1e3},
                         {"tflop", part.flops_per_step / 1e12},
                         {"tflops_per_s", part.tflops_per_s},
                         {"peak_tflops", part.peak_tflops},
                         {"mfu", part.mfu}});
      double gdn_ns = 0;
      std::map<std::string, std::pair<double, int64_t>> by_kernel;  // ns, launches
      for (const auto& record : records) {
        const double ns = double(record.end_ns - record.start_ns);
        if (record.name.find("sm90_gdn_") != std::string::npos) gdn_ns += ns;
        auto& [total, launches] = by_kernel[record.name.substr(0, 90)];
        total += ns;
        ++launches;
      }
      if (args.kernels > 0) {
        std::vector<std::pair<double, std::string>> top;
        for (const auto& [kernel, sum] : by_kernel) top.emplace_back(sum.first, kernel);
        std::sort(top.rbegin(), top.rend());
        nlohmann::json kernels = nlohmann::json::array();
        for (size_t k = 0; k < top.size() && int64_t(k) < args.kernels; ++k)
          kernels.push_back({{"kernel", top[k].second}, {"ms", top[k].first / 1e6},
                             {"launches", by_kernel[top[k].second].second}});
        top_kernels.push_back({{"tokens", length}, {"delta_rule", path}, {"profiled_ms", profiled_ms},
                               {"kernels", kernels}});
      }
      const double gdn_ms = gdn_ns / 1e6, share = gdn_ms / profiled_ms;
      path_ms.push_back(ms);
      report["rows"].push_back({{"tokens", length},
                                {"delta_rule", path},
                                {"ms", ms},
                                {"tokens_per_second", double(length * (engine_path ? args.prompts : 1)) * 1e3 / ms},
                                {"gdn_kernel_ms", gdn_ms},
                                {"gdn_share", share},
                                {"profiled_ms", profiled_ms},
                                {"parts", parts}});
      if (path == "chunked" && args.decode_after > 0) report["rows"].back()["decode_ms_per_token_after"] = decode_ms;
    }
    // Speedup of each path over the token-by-token one, printed once all ran.
    const double baseline = path_ms[1];
    for (size_t p = 0; p < paths.size(); ++p) {
      auto& row = report["rows"][report["rows"].size() - paths.size() + p];
      row["speedup_vs_token_by_token"] = baseline / path_ms[p];
      if (args.json) continue;
      std::printf("| %lld | %s | %.1f | %.0f | %.1f | %.0f%% | %.2fx |\n", (long long)length, paths[p].first.c_str(),
                  row["ms"].get<double>(), row["tokens_per_second"].get<double>(), row["gdn_kernel_ms"].get<double>(),
                  100.0 * row["gdn_share"].get<double>(), baseline / path_ms[p]);
      std::fflush(stdout);
    }
  }
  if (args.kernels > 0) report["top_kernels"] = top_kernels;
  if (args.json) {
    std::cout << report.dump(2) << std::endl;
    return;
  }
  std::printf("\nWhere the profiled runs' time went, and MFU (FLOP rate over the measured peak of the part's "
              "precision; total: all FLOPs over the wall time)\n\n| tokens | path | part | ms | TFLOP | TFLOP/s | MFU |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const auto& row : report["rows"]) {
    for (const auto& part : row["parts"])
      std::printf("| %lld | %s | %s | %.1f | %.2f | %.0f | %s |\n", (long long)row["tokens"].get<int64_t>(),
                  row["delta_rule"].get<std::string>().c_str(), part["part"].get<std::string>().c_str(),
                  part["ms"].get<double>(), part["tflop"].get<double>(), part["tflops_per_s"].get<double>(),
                  part["peak_tflops"].get<double>() > 0
                      ? (std::to_string(int(std::lround(100 * part["mfu"].get<double>()))) + "%").c_str()
                      : "-");
    if (row.contains("decode_ms_per_token_after"))
      std::printf("| %lld | %s | decode after the prompt | %.2f ms per token | | | |\n",
                  (long long)row["tokens"].get<int64_t>(), row["delta_rule"].get<std::string>().c_str(),
                  row["decode_ms_per_token_after"].get<double>());
  }
  for (const auto& run : top_kernels) {
    std::printf("\n%lld tokens, %s: top kernels of one profiled run (%.1f ms)\n\n| kernel | ms | launches |\n"
                "|---|---|---|\n",
                (long long)run["tokens"].get<int64_t>(), run["delta_rule"].get<std::string>().c_str(),
                run["profiled_ms"].get<double>());
    for (const auto& k : run["kernels"])
      std::printf("| %s | %.2f | %lld |\n", k["kernel"].get<std::string>().c_str(), k["ms"].get<double>(),
                  (long long)k["launches"].get<int64_t>());
  }
}

}  // namespace vt::apps
#endif
