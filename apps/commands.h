// Subcommand groups of the `vt` binary. Each adds its subcommands to the app; a subcommand's
// callback does the work and throws vt::Error on failure (main prints it and exits 1).
#pragma once

#include <CLI/CLI.hpp>

namespace vt::apps {

void add_model_commands(CLI::App& app);  // generate, inspect
void add_chat_template_commands(CLI::App& app);  // chat-template
void add_bench_commands(CLI::App& app);  // bench decode
void add_serve_bench_commands(CLI::App& app);  // bench serve (after add_bench_commands)
void add_gemm_bench_commands(CLI::App& app);  // bench gemm (after add_bench_commands)
void add_op_bench_commands(CLI::App& app);  // bench op <name> (after add_bench_commands)
void add_profile_commands(CLI::App& app);  // profile decode
void add_tokenizer_commands(CLI::App& app);  // tokenize, detokenize
void add_chat_commands(CLI::App& app);  // chat
void add_eval_commands(CLI::App& app);  // eval perplexity, drift, layers
void add_eval_layers_command(CLI::App& eval);  // eval layers (apps/eval_layers.cpp)
void add_serve_commands(CLI::App& app);  // serve
void add_parse_output_commands(CLI::App& app);  // parse-output

}  // namespace vt::apps
