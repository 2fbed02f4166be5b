// fca exec: actual execution of one or more models (exec/exec.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include "core/parse.h"
#include "cli/common.h"
#include "core/error.h"
#include "data/corpus.h"
#include "exec/exec.h"
#include "exec/exec_family.h"

namespace fca::cli {

void add_exec_command(CLI::App& app) {
  struct Flags {
    ExecOptions exec;
    std::string data, thresholds;
    int threads = 0;
    std::string precision = "fp32";
    bool no_progress = false;
    RunSettingFlags family_settings;
  };
  auto f = std::make_shared<Flags>();
  ExecOptions& e = f->exec;
  CLI::App* cmd = app.add_subcommand("exec", "Actual execution: executed blocks, FLOPs, latency, real skipping");
  cmd->add_option("--model", e.models, "Checkpoint (repeat for several models)");
  cmd->add_option("--external", e.externals,
                  "Measure a model fca does not implement: the command that starts its adapter (docs/external-protocol.md; "
                  "repeat for several), e.g. \"python3 examples/gated_adapter.py --model m.safetensors\"");
  cmd->add_option("--external-timeout", e.external_timeout_s, "Seconds to wait for each answer of an adapter")
      ->check(number_in(kMinExternalTimeout, kMaxExternalTimeout))->capture_default_str();
  cmd->add_option("--data", f->data, "Data folder (timing and NLL windows from test, calibration from valid)");
  cmd->add_option("--batch", e.batch, "Windows per forward pass")->check(whole_number(1))->capture_default_str();
  cmd->add_option("--runs", e.runs, "Timed rounds at least (every configuration of every model once per round, interleaved)")
      ->check(whole_number(1))->capture_default_str();
  cmd->add_option("--max-runs", e.max_runs, "Timed rounds at most: rounds go on until every latency ratio's 95% interval is "
                                            "narrower than --margin, the --time-budget is spent, or this many")
      ->check(whole_number(1))->capture_default_str();
  cmd->add_option("--time-budget", e.time_budget_s, "Seconds of timed runs after which no round beyond --runs starts")
      ->check(non_negative_number)->capture_default_str();
  cmd->add_option("--margin", e.margin, "Practical latency margin: a ratio within 1 +- margin is never called faster or slower")
      ->check(number_in(1e-6, 0.999999))->capture_default_str();
  cmd->add_option("--warmup", e.warmup, "Warm-up runs")->check(whole_number(0))->capture_default_str();
  cmd->add_option("--skip-threshold", f->thresholds, "Comma-separated thresholds in [0, 1] for the real skip sweep (--model only)");
  f->family_settings.add_to(*cmd, exec_run_settings());
  cmd->add_option("--calib-windows", e.calib_windows, "Valid-split windows for the calibrated static gates")
      ->check(whole_number(1))->capture_default_str();
  cmd->add_option("--eval-windows", e.eval_windows, "Test-split windows for NLL")->check(whole_number(1))->capture_default_str();
  cmd->add_option("--out", e.out_dir, "Output folder (exec.json, exec.md)")->required();
  cmd->add_flag("--no-progress", f->no_progress, "No progress bar");
  add_threads_flag(*cmd, f->threads);
  add_precision_flag(*cmd, f->precision);
  cmd->callback(naming_batch(e.batch, [f, cmd] {
    apply_threads(f->threads);
    apply_precision(f->precision);
    ExecOptions options = f->exec;
    // --runs above the default maximum raises the maximum with it unless --max-runs says otherwise.
    if (cmd->count("--max-runs") == 0) options.max_runs = std::max(options.max_runs, options.runs);
    options.progress = !f->no_progress;
    std::stringstream list(f->thresholds);
    for (std::string item; std::getline(list, item, ',');) {
      options.skip_thresholds.push_back(parse_number(item, "--skip-threshold: an entry", 0.0, 1.0));
    }
    options.family_settings = f->family_settings.values();
    check_exec_options(options);  // a bad flag is named before the corpus is looked for
    Corpus corpus(resolve_data_dir(f->data));
    const auto j = run_exec(corpus, options);
    std::printf("%s", exec_markdown(j).c_str());
    std::printf("written: %s/exec.json, exec.md\n", options.out_dir.c_str());
  }));
}

}  // namespace fca::cli
