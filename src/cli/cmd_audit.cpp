// fca audit and fca aggregate: the Frozen-Controller Audit of one model, and its combination
// across independently trained checkpoints.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include "audit/aggregate.h"
#include "audit/audit.h"
#include "cli/common.h"
#include "core/communicator.h"
#include "core/error.h"
#include "core/file_io.h"
#include "models/registry.h"
#include "report/audit_markdown.h"
#include "models/capabilities.h"

namespace fca::cli {

namespace {

struct AuditFlags {
  AuditOptions audit;
  std::string data, conditions, external;
  double external_timeout = 600;
  int threads = 0;
  std::string precision = "fp32";
  bool no_progress = false;
  bool no_prefix_reuse = false;
  bool plan_only = false;
  RunSettingFlags family_settings;
};

void add_audit_flags(CLI::App* cmd, AuditFlags& f) {
  AuditOptions& a = f.audit;
  auto* model = cmd->add_option("--model", a.model_path, "Checkpoint of any installed family (`fca families`): a .safetensors file or a model folder");
  auto* external = cmd->add_option("--external", f.external,
                                   "Audit a model fca does not implement: the command that starts its adapter "
                                   "(docs/external-protocol.md), e.g. \"python3 examples/gated_adapter.py --model m.safetensors\"");
  model->excludes(external);
  cmd->add_option("--external-timeout", f.external_timeout, "Seconds to wait for each answer of the adapter")
      ->check(number_in(kMinExternalTimeout, kMaxExternalTimeout))->capture_default_str();
  cmd->add_option("--data", f.data, "Data folder (test = evaluation set, valid = calibration set); default: the nlp-corpus");
  cmd->add_option("--eval-windows", a.eval_windows, "Evaluation windows from the test split")->check(whole_number(2, "", 1 << 24))->capture_default_str();
  cmd->add_option("--calib-windows", a.calib_windows, "Calibration windows from the valid split")->check(whole_number(1))->capture_default_str();
  cmd->add_option("--seq", a.tokens, "Window length T (0 = the model's seq_len)")->check(whole_number(0, "0 = the model's seq_len"))->capture_default_str();
  cmd->add_option("--reps", a.reps, "Randomisations per randomised condition")->check(whole_number(2, "", 100000))->capture_default_str();
  cmd->add_option("--batch", a.batch,
                 "Windows per forward pass; 0 = the fastest of 1..16 by a probe where results do not depend on it "
                 "(fca's gated and MUDD models), else 8")
      ->check(whole_number(0, "0 = chosen by a probe"))->capture_default_str();
  cmd->add_option("--bootstrap", a.bootstrap_resamples, "Bootstrap resamples")->check(whole_number(1))->capture_default_str();
  cmd->add_option("--seed", a.seed, "Audit seed (randomisations and bootstrap)")->check(unsigned_integer)->capture_default_str();
  cmd->add_option("--conditions", f.conditions, "Comma-separated conditions (default: all that apply)");
  cmd->add_option("--cache", a.cache_path, "Coefficient cache: reused when it exists and matches, else written (default: <out>/cache.safetensors)");
  cmd->add_option("--small-penalty", a.small_penalty, "Threshold: static_profile penalty small iff upper CI < this")
      ->check(non_negative_number)->capture_default_str();
  cmd->add_option("--high-retention", a.high_retention, "Threshold: retention high iff lower CI > this")
      ->check(number_in(0, 1))->capture_default_str();
  cmd->add_option("--replay-tolerance", a.replay_tolerance, "Allowed replay difference (0 = bitwise; for other backends only)")
      ->check(non_negative_number)->capture_default_str();
  cmd->add_option("--out", a.out_dir, "Output folder (audit.json, windows.csv, audit.md); required except with --plan");
  f.family_settings.add_to(*cmd, audit_run_settings());
  cmd->add_flag("--no-progress", f.no_progress, "No progress bar");
  cmd->add_flag("--plan", f.plan_only,
                "Print the plan (passes, tokens, FLOPs, memory, time estimated from a short probe) and stop");
  cmd->add_flag("--allow-insensitive-replay", a.allow_insensitive_replay,
                "Audit even when replaying changed coefficients leaves the logits unchanged (the replay ignores them: "
                "every penalty is then 0 by construction; audit.json and the report say so)");
  cmd->add_flag("--joint-token-shuffle", a.joint_token_shuffle,
                "token_shuffle and cross_shuffle move every stream of a layer with one permutation (site-joint: a token's "
                "whole coefficient square moves as a unit) instead of one permutation per stream");
  cmd->add_flag("--no-prefix-reuse", f.no_prefix_reuse,
                "Recompute the embedding and block 0 in every condition replay (bitwise the same results, slower)");
  add_threads_flag(*cmd, f.threads);
  add_precision_flag(*cmd, f.precision);
}

// The audit of the flags' model: fca's checkpoint or an adapter's; rank 0 writes and prints.
void run_audit_command(const AuditFlags& f) {
  apply_threads(f.threads);
  apply_precision(f.precision);
  AuditOptions options = f.audit;
  options.prefix_reuse = !f.no_prefix_reuse;
  options.progress = !f.no_progress;
  options.plan_only = f.plan_only;
  options.communicator = &world();  // mpirun: every rank runs the audit; rank 0 writes it
  std::stringstream list(f.conditions);
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) options.conditions.push_back(item);
  if (options.model_path.empty() == f.external.empty()) throw Error("audit: give --model or --external (one of them)");
  Corpus corpus(resolve_data_dir(f.data));
  const int max_tokens = options.tokens > 0 ? options.tokens : 1 << 20;
  std::unique_ptr<AuditableModel> model;
  if (f.external.empty()) {
    model = open_model(options.model_path, std::max(1, options.batch), max_tokens);
    for (const auto& [key, values] : f.family_settings.values()) options.family_settings[key] = values.front();
  } else {
    if (!f.family_settings.given_flags().empty())
      throw Error("audit: " + f.family_settings.given_flags() + " applies to fca's own families' models, not to --external");
    if (f.precision != "fp32")
      throw Error("audit: --precision " + f.precision + " sets the precision of fca's own matrix products; an --external "
                  "model computes in its adapter's process, in the adapter's precision");
    // The adapter learns its place among the ranks (fca_adapter.rank(), local_rank()), so that a node
    // with several GPUs audits one model replica per GPU (docs/audit-your-model.md).
    ::setenv("FCA_RANK", std::to_string(world().rank()).c_str(), 1);
    ::setenv("FCA_RANKS", std::to_string(world().size()).c_str(), 1);
    auto external = open_external_model(f.external, f.external_timeout);
    options.model_path = external->model_path();
    options.adapter_command = f.external;
    model = std::move(external);
  }
  const auto j = run_audit(*model, corpus, options);
  if (!world().root()) return;
  if (options.plan_only) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  write_audit_markdown(options.out_dir, j);
  std::printf("audit of %s: baseline NLL %.4f nats/byte\n", options.model_path.c_str(), j["baseline"]["nll"].get<double>());
  for (const auto& c : j["conditions"])
    std::printf("  %-20s DeltaNLL %+.5f  95%% CI [%+.5f, %+.5f]\n", c["name"].get<std::string>().c_str(),
                c["delta_nll"].get<double>(), c["ci95"][0].get<double>(), c["ci95"][1].get<double>());
  std::printf("written: %s/audit.json, windows.csv, audit.md\n", options.out_dir.c_str());
}

}  // namespace

void add_audit_command(CLI::App& app) {
  auto f = std::make_shared<AuditFlags>();
  CLI::App* cmd = app.add_subcommand("audit", "Frozen-Controller Audit: coefficient variation and functional dependence");
  add_audit_flags(cmd, *f);
  cmd->callback(naming_batch(f->audit.batch, [f] { run_audit_command(*f); }));
}

void add_aggregate_command(CLI::App& app) {
  struct Flags {
    std::vector<std::string> audits;
    std::string out;
    int bootstrap = 10000;
    uint64_t seed = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("aggregate", "Combine audits of independently trained checkpoints");
  cmd->add_option("audits", f->audits, "audit.json files (one per checkpoint)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", f->out, "Output folder (aggregate.json, aggregate.md); default: print only");
  cmd->add_option("--bootstrap", f->bootstrap, "Bootstrap resamples")->check(whole_number(1))->capture_default_str();
  cmd->add_option("--seed", f->seed, "Bootstrap seed")->check(unsigned_integer)->capture_default_str();
  cmd->callback([f] {
    if (!f->out.empty()) ensure_folder(f->out, "--out");  // before anything is printed or computed
    const auto j = aggregate_audits(f->audits, f->bootstrap, f->seed);
    const std::string md = aggregate_markdown(j);
    std::printf("%s", md.c_str());
    if (!f->out.empty()) {
      write_json_file(f->out + "/aggregate.json", j);
      write_file_atomically(f->out + "/aggregate.md", [&](std::ostream& out) { out << md; });
    }
  });
}

}  // namespace fca::cli
