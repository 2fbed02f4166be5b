// fca: Frozen-Controller Auditing of dynamic neural networks. Thin entry point: every subcommand
// parses its flags and calls a library function; errors become one message and a nonzero exit.
#include "families/families.h"
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "cli/common.h"
#include "core/communicator.h"
#include "core/error.h"
#include "ops/provenance.h"

int main(int argc, char** argv) {
  fca::install_families();  // before the commands: `fca train` takes its flags from the family table
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
  fca::cli::add_paper_command(app);
  fca::cli::add_convert_command(app);
  fca::cli::add_families_command(app);
  // Under mpirun every rank runs the same command (docs/cluster.md). A rank that fails ends them all:
  // the others would otherwise wait for it in a collective forever.
  const auto fail = [](int code) {
    if (code != 0 && fca::world().size() > 1) fca::abort_world(code);
    fca::stop_world();
    return code;
  };
  try {
    fca::start_world(&argc, &argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return fail(app.exit(e));
  } catch (const fca::Error& e) {
    std::fprintf(stderr, "fca: error%s: %s\n", fca::world().size() > 1 ? (" on " + fca::world().description()).c_str() : "",
                 e.what());
    return fail(1);
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that the file system refused, reached by a path no check above covers.
    std::fprintf(stderr, "fca: error: %s: %s\n", e.path1().empty() ? "file system" : e.path1().c_str(), e.code().message().c_str());
    return fail(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fca: internal error: %s\n", e.what());
    return fail(2);
  }
  fca::stop_world();
  return 0;
}
