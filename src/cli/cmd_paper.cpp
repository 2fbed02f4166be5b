// fca paper: the reproduction of the paper from one config (study/paper.h; docs/paper.md).
#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "study/paper.h"

namespace fca::cli {

void add_paper_command(CLI::App& app) {
  struct Flags {
    std::string config, out;
    int threads = 0;
    bool plan = false, no_progress = false;
    StudyEngine engine;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("paper", "Reproduce the paper's tables and figures (the study on every corpus), beside the paper's values");
  cmd->add_option("--config", f->config, "Paper config (JSON; see docs/paper.md), e.g. configs/paper-quick.json")->required()->check(CLI::ExistingFile);
  cmd->add_flag("--plan", f->plan, "Print parameters, FLOPs, memory and estimated time per machine class and MPI rank count, and stop");
  cmd->add_flag("--no-progress", f->no_progress, "No progress output");
  cmd->add_option("--out", f->out, "Output folder (default: the config's \"out\")");
  add_threads_flag(*cmd, f->threads);
  add_engine_flags(*cmd, f->engine);
  cmd->callback([f] {
    apply_threads(f->threads);
    PaperConfig c = parse_paper_config(read_json_config(f->config, "paper config"), f->config);
    if (!f->out.empty()) c.out = f->out;
    check_study_engine(f->engine, "fca paper");
    c.study.engine = f->engine;
    if (f->plan) {
      std::printf("%s", paper_plan_text(paper_plan(c, f->config)).c_str());
      return;
    }
    const std::string md = run_paper(c, f->config, !f->no_progress);
    std::printf("paper: %s (and paper.html, paper.json beside it)\n", md.c_str());
  });
}

}  // namespace fca::cli
