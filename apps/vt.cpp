// The `vt` command line: subcommand groups are registered from apps/*_commands.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "apps/commands.h"
#include "core/error.h"
#include "core/threading.h"

int main(int argc, char** argv) {
  CLI::App app{"vt: inference engine for the Qwen3.5 / Qwen3-Next family"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "CPU threads (default: all cores, or VT_NUM_THREADS)")
      ->each([](const std::string& value) { vt::set_num_threads(std::stoi(value)); });
  vt::apps::add_model_commands(app);
  vt::apps::add_chat_template_commands(app);
  vt::apps::add_bench_commands(app);
  vt::apps::add_serve_bench_commands(app);
  vt::apps::add_gemm_bench_commands(app);
  vt::apps::add_op_bench_commands(app);
  vt::apps::add_profile_commands(app);
  vt::apps::add_tokenizer_commands(app);
  vt::apps::add_chat_commands(app);
  vt::apps::add_eval_commands(app);
  vt::apps::add_serve_commands(app);
  vt::apps::add_parse_output_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help exits 0; any usage error exits 2.
    return app.exit(error) == 0 ? 0 : 2;
  } catch (const vt::Error& error) {
    std::fprintf(stderr, "vt: error: %s\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "vt: error: %s\n", error.what());
    return 1;
  }
  return 0;
}
