// `vt bench gemm`, also `vt bench op gemm` (apps/op_bench_commands.cpp): the options and the run,
// shared by both commands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace vt::apps {

struct GemmBenchArgs {
  std::string synthetic = "qwen3.5-27b", m_list = "1,8,16,32,64,128";
  int64_t iters = 40;
  bool json = false;
};

// --synthetic, --m, --iters, --json on `command`.
void add_gemm_bench_options(CLI::App* command, GemmBenchArgs& args);
// Every decode GEMM shape of the model on each backend (apps/gemm_bench_commands.cpp says how it
// times); throws vt::Error without a CUDA build or GPU, or when a kernel did not run as launched.
void run_bench_gemm(const GemmBenchArgs& args);

}  // namespace vt::apps
