// fca study: the whole experiment from one JSON config (study/study.h; docs/study.md).
#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "study/study.h"

namespace fca::cli {

void add_study_command(CLI::App& app) {
  struct Flags {
    std::string config, out;
    int threads = 0;
    bool no_progress = false;
    StudyEngine engine;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("study", "Train, evaluate, audit, aggregate, measure and report, from one config");
  cmd->add_option("--config", f->config, "Study config (JSON; see docs/study.md)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", f->out, "Output folder (default: the config's \"out\")");
  cmd->add_flag("--no-progress", f->no_progress, "No progress output");
  add_threads_flag(*cmd, f->threads);
  add_engine_flags(*cmd, f->engine);
  cmd->callback([f] {
    apply_threads(f->threads);
    const std::string report = run_study(f->config, f->out, !f->no_progress, f->engine);
    std::printf("report: %s\n", report.c_str());
  });
}

}  // namespace fca::cli
