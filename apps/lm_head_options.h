// The output layer's format, for every command that loads a model (generate, chat, serve, eval
// perplexity, bench decode / prefill): `--lm-head bf16|fp8` (as stored, or quantised at load to
// FP8 128x128 blocks, W8A8) and `--lm-head-exact-columns N` (with fp8: the N input columns of
// largest norm kept out of FP8; default 32, 0 for none: model/linear.h, Fp8Quantization).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "core/error.h"
#include "model/linear.h"

namespace vt::apps {

struct LmHeadArgs {
  std::string format = "bf16";
  int64_t exact_columns = -1;  // -1: not given (kDefaultLmHeadExactColumns with fp8)
};

inline void add_lm_head_options(CLI::App* command, LmHeadArgs& args) {
  command->add_option("--lm-head", args.format, "output layer: bf16 (as stored) or fp8 (128x128 blocks, quantised at load)");
  command
      ->add_option("--lm-head-exact-columns", args.exact_columns,
                   "with --lm-head fp8: input columns of largest norm kept out of FP8 (default 32; 0: none; the "
                   "GPU takes a multiple of 8 <= 64)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
}

// The output layer's FP8 quantisation asked for, or nothing for the layer as stored.
inline std::optional<Fp8Quantization> lm_head_quantization(const LmHeadArgs& args) {
  VT_CHECK(args.format == "bf16" || args.format == "fp8", "--lm-head: expected bf16 or fp8, got '", args.format, "'");
  VT_CHECK(args.exact_columns < 0 || args.format == "fp8", "--lm-head-exact-columns goes with --lm-head fp8");
  if (args.format != "fp8") return std::nullopt;
  Fp8Quantization quantization;
  quantization.exact_columns = args.exact_columns < 0 ? kDefaultLmHeadExactColumns : args.exact_columns;
  return quantization;
}

}  // namespace vt::apps
