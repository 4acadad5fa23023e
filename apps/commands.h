// Subcommand groups of the `vt` binary. Each adds its subcommands to the app; a subcommand's
// callback does the work and throws vt::Error on failure (main prints it and exits 1).
#pragma once

#include <CLI/CLI.hpp>

namespace vt::apps {

void add_model_commands(CLI::App& app);  // generate, inspect
void add_bench_commands(CLI::App& app);  // bench decode

}  // namespace vt::apps
