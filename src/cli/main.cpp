// fca: Frozen-Controller Auditing of dynamic neural networks. Thin entry point: every subcommand
// parses its flags and calls a library function; errors become one message and a nonzero exit.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/common.h"
#include "core/error.h"
#include "core/provenance.h"

int main(int argc, char** argv) {
  CLI::App app{"fca: frozen-controller auditing of dynamic neural networks"};
  app.set_version_flag("--version", fca::fca_version_string());
  app.require_subcommand(1);
  fca::cli::add_train_command(app);
  fca::cli::add_eval_command(app);
  fca::cli::add_info_command(app);
  fca::cli::add_trace_command(app);
  fca::cli::add_bench_command(app);
  fca::cli::add_audit_command(app);
  fca::cli::add_aggregate_command(app);
  fca::cli::add_exec_command(app);
  fca::cli::add_report_command(app);
  fca::cli::add_study_command(app);
  fca::cli::add_convert_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fca::Error& e) {
    std::fprintf(stderr, "fca: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fca: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
