// fca bench forward / fca bench train: tokens/s and achieved GFLOP/s against this machine's measured
// SGEMM peak. A family with its own benchmark (ExecFamily::bench_forward / bench_train) is timed by
// it, FLOPs by its formula; any other goes through the registry (forward of a checkpoint) or its
// Trainable (a step of a fresh model, or of a checkpoint's weights), FLOPs counted at the GEMM calls.
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>

#include "cli/common.h"
#include "core/communicator.h"
#include "ops/gemm.h"
#include "ops/onednn_matmul.h"
#include "ops/provenance.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "core/exec_counters.h"
#include "core/phase_timer.h"
#include "core/file_io.h"
#include "exec/exec_family.h"
#include "exec/timing.h"
#include "models/base/stream.h"  // kByteVocab
#include "models/registry.h"
#include "train/train_family.h"
#include "train/trainer.h"

namespace fca::cli {
namespace {

struct BenchFlags {
  FamilyFlags family;  // of a fresh model
  std::string model;
  uint64_t seed = 0;
  int batch = 8, seq = 0, runs = 20, warmup = 3, threads = 0;
  bool json = false;
  std::string precision = "fp32";  // forward only (bf16 training is not built)
  std::string source = "live";  // forward only: live controller or replayed coefficients
};

void add_bench_flags(CLI::App& cmd, BenchFlags& f) {
  f.family.add_to(cmd, "Family of the fresh model (without --model)");
  cmd.add_option("--model", f.model, "Checkpoint or model folder to benchmark (default: a fresh model of the family flags)");
  cmd.add_option("--seed", f.seed, "Initialisation seed of the fresh model")->check(unsigned_integer)->capture_default_str();
  cmd.add_option("--batch", f.batch, "Windows per pass")->check(whole_number(1))->capture_default_str();
  cmd.add_option("--tokens", f.seq, "Tokens per window (0 = the model's seq_len)")->check(whole_number(0, "0 = the model's seq_len"))->capture_default_str();
  cmd.add_option("--runs", f.runs, "Timed repetitions (passes or training steps)")->check(whole_number(1))->capture_default_str();
  cmd.add_option("--warmup", f.warmup, "Untimed warm-up repetitions")->check(whole_number(0))->capture_default_str();
  cmd.add_flag("--json", f.json, "Print one JSON object instead of a table");
  add_threads_flag(cmd, f.threads);
}

// The request to a family's own benchmark (ExecFamily::bench_forward / bench_train).
BenchRequest request_of(const BenchFlags& f, const CLI::App& cmd) {
  BenchRequest r;
  r.model = f.model;
  r.shape = f.family.shape;
  r.settings = f.family.settings(cmd);
  r.seed = f.seed;
  r.batch = f.batch;
  r.tokens = f.seq;
  r.replay = f.source == "replay";
  return r;
}

// The family whose benchmark runs: the checkpoint's, or --arch for a fresh model.
const ExecFamily& bench_family(const BenchFlags& f) {
  return exec_family_named(f.model.empty() ? f.family.arch : family_of(f.model).name);
}

// Where the time of one pass goes: `runs` more passes with the phase timer installed (after the
// timed runs, so the timing itself does not disturb them); seconds per pass by phase, and the rest
// (work outside any kernel scope: residual adds and copies in the model code) as "other".
struct Breakdown {
  std::array<double, kPhaseCount> seconds{};
  double total = 0, other = 0;
};

Breakdown profile_phases(const std::function<void()>& pass, int runs) {
  PhaseTimes times;
  Breakdown b;
  const auto start = std::chrono::steady_clock::now();
  {
    const PhaseTiming timing(times);
    for (int r = 0; r < runs; ++r) pass();
  }
  b.total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / runs;
  double accounted = 0;
  for (int p = 0; p < kPhaseCount; ++p) accounted += b.seconds[size_t(p)] = times.seconds[size_t(p)] / runs;
  b.other = std::max(0.0, b.total - accounted);
  return b;
}

// The timed runs between two probes of the SGEMM peak. The peak is the better of the two: a probe
// that lands in a neighbour's busy period reads low (212 GFLOP/s against 400-420 around it, once,
// on this project's machine), and a single low probe would report a pass above 100% of "peak".
struct TimedPasses {
  TimingStats stats;
  double peak_before = 0, peak_after = 0;
  double peak() const { return std::max(peak_before, peak_after); }
};

TimedPasses time_against_peak(const std::function<void()>& pass, int warmup, int runs) {
  TimedPasses t;
  t.peak_before = measure_sgemm_peak_gflops();
  t.stats = time_runs(pass, warmup, runs);
  t.peak_after = measure_sgemm_peak_gflops();
  return t;
}

void report(const BenchFlags& f, const char* what, const nlohmann::ordered_json& config, const std::string& name, int T,
            const TimedPasses& timed, double flops, size_t state_bytes, const std::string& model_hash,
            const Breakdown& breakdown, const std::optional<StepStats>& first_step = std::nullopt) {
  const TimingStats& s = timed.stats;
  const double peak = timed.peak();
  const double tokens_per_s = double(f.batch) * T / s.median;
  const double gflops = flops / s.median / 1e9;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  nlohmann::ordered_json j;
  j["schema"] = "fca-bench-v1";
  j["benchmark"] = what;
  j["config"] = config;
  j["batch"] = f.batch;
  j["tokens"] = T;
  j["median_s"] = s.median;
  j["timing"] = s.to_json();
  j["tokens_per_s"] = tokens_per_s;
  j["gflop_per_pass"] = flops / 1e9;
  j["gflops_per_s"] = gflops;
  j["sgemm_peak_gflops"] = peak;
  j["sgemm_peak_probes_gflops"] = {timed.peak_before, timed.peak_after};  // before and after the timed runs
  j["peak_ratio"] = gflops / peak;
  j["run_state_mib"] = double(state_bytes) / (1 << 20);
  nlohmann::ordered_json parts;
  for (int p = 0; p < kPhaseCount; ++p)
    parts[kPhaseNames[p]] = {{"ms", 1e3 * breakdown.seconds[size_t(p)]}, {"share", breakdown.seconds[size_t(p)] / breakdown.total}};
  parts["other"] = {{"ms", 1e3 * breakdown.other}, {"share", breakdown.other / breakdown.total}};
  j["breakdown"] = parts;
  j["breakdown_pass_ms"] = 1e3 * breakdown.total;
  j["max_rss_mib"] = double(usage.ru_maxrss) / 1024;
  if (first_step) j["first_step"] = {{"loss", first_step->loss}, {"grad_norm", first_step->grad_norm}};
  auto prov = provenance_base();
  if (!model_hash.empty()) prov["model_sha256"] = model_hash;
  j["provenance"] = prov;
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("bench %s: %s, batch %d x %d tokens, %d threads\n", what, name.c_str(), f.batch, T, int(prov["threads"]));
  std::printf("  median %.4f s  [p10 %.4f, p90 %.4f]  over %d runs\n", s.median, s.p10, s.p90, s.runs);
  if (first_step) std::printf("  first step: loss %.6f, gradient norm %.6g\n", first_step->loss, first_step->grad_norm);
  std::printf("  %.0f tokens/s   %.1f GFLOP/s model   SGEMM peak %.1f GFLOP/s   ratio %.1f%%\n", tokens_per_s, gflops, peak,
              100 * gflops / peak);
  std::printf("  products in %s: %s\n", matmul_precision_name(matmul_precision()), blas_description().c_str());
  std::printf("  breakdown of a pass (%.2f ms, profiled):", 1e3 * breakdown.total);
  for (int p = 0; p < kPhaseCount; ++p)
    std::printf("  %s %.2f ms (%.0f%%)", kPhaseNames[p], 1e3 * breakdown.seconds[size_t(p)],
                100 * breakdown.seconds[size_t(p)] / breakdown.total);
  std::printf("  other %.2f ms (%.0f%%)\n", 1e3 * breakdown.other, 100 * breakdown.other / breakdown.total);
}

// bench forward: the family's own benchmark where it has one (FLOPs by its formula), else a
// checkpoint through the registry (a pass is forward + loss, FLOPs counted at the GEMM calls).
void bench_forward(const BenchFlags& f, const CLI::App& cmd) {
  apply_threads(f.threads);
  apply_precision(f.precision);
  const ExecFamily& family = bench_family(f);
  const bool replay = f.source == "replay";
  if (family.bench_forward) {  // the family's own benchmark, FLOPs by its formula
    const BenchWork w = family.bench_forward(request_of(f, cmd));
    const TimedPasses s = time_against_peak(w.pass, f.warmup, f.runs);
    report(f, replay ? "forward-replay" : "forward", w.config, w.name, w.tokens, s, w.flops_per_pass, w.run_state_bytes,
           w.model_hash, profile_phases(w.pass, f.runs));
    return;
  }
  // Any other family, through the registry: a pass is forward + loss, FLOPs counted at the GEMM calls.
  if (f.model.empty())
    throw Error("bench forward --arch " + f.family.arch + " needs --model (a checkpoint of the family to time)");
  (void)f.family.settings(cmd);  // flags of another family are refused here too
  const auto model = open_model(f.model, f.batch, f.seq > 0 ? f.seq : 1 << 20);
  const int T = f.seq > 0 ? f.seq : model->max_tokens();
  std::vector<int32_t> tokens(size_t(f.batch) * T), targets(tokens.size());
  Rng rng(f.seed + 1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = int32_t(rng.below(uint64_t(model->vocab())));
    targets[i] = int32_t(rng.below(uint64_t(model->vocab())));
  }
  CoefficientTensor recorded = model->make_coefficients(f.batch, T);
  std::vector<double> nll(size_t(f.batch));
  model->run_live(tokens.data(), targets.data(), f.batch, T, &recorded, 0, nll.data());
  const auto pass = [&] {
    if (replay) model->run_replay(tokens.data(), targets.data(), f.batch, T, recorded, nll.data());
    else model->run_live(tokens.data(), targets.data(), f.batch, T, nullptr, 0, nll.data());
  };
  // The FLOPs of the pass that is timed, counted as it runs: a replay skips the GEMMs of the
  // controller (MUDD's generators, the MoE router), which a live pass would count.
  ExecCounters counters;
  {
    CountingScope scope(counters);
    pass();
  }
  const TimedPasses s = time_against_peak(pass, f.warmup, f.runs);
  report(f, replay ? "forward-replay" : "forward", nlohmann::ordered_json::parse(model->config_json()),
         model->description() + " (" + std::to_string(model->parameter_count()) + " parameters)", T, s,
         double(counters.gemm_flops.load()), model->run_state_bytes(), model->content_hash(), profile_phases(pass, f.runs));
}

// bench train: the family's own benchmark where it has one (FLOPs by its formula), else its
// Trainable: a fresh model of the flags, or (--model) one of the flags' config holding the
// checkpoint's weights; FLOPs counted at the GEMM calls.
void bench_train(const BenchFlags& f, const CLI::App& cmd) {
  apply_threads(f.threads);
  apply_precision("fp32");  // training's products are fp32 (no bf16 training mode is built)
  const ExecFamily& family = bench_family(f);
  if (family.bench_train) {  // the family's own benchmark, FLOPs by its formula
    const BenchWork w = family.bench_train(request_of(f, cmd));
    const TimedPasses s = time_against_peak(w.pass, f.warmup, f.runs);
    report(f, "train", w.config, w.name, w.tokens, s, w.flops_per_pass, w.run_state_bytes, w.model_hash,
           profile_phases(w.pass, f.runs), w.first_step);
    return;
  }
  if (!f.model.empty() && family.name != f.family.arch)
    throw Error("bench train --model " + f.model + ": a " + family.name + " checkpoint; give --arch " + family.name +
                " and the shape and family flags of its config");
  if (f.seq > 0 && f.seq != f.family.shape.seq)
    throw Error("bench train --arch " + f.family.arch + ": set the window with --seq");
  TrainOptions o;
  o.arch = f.family.arch;
  o.seed = f.seed;
  o.batch = f.batch;
  o.shape = f.family.shape;
  o.settings = f.family.settings(cmd);
  const auto model = make_trainable(o);
  std::string weights_hash;  // of the checkpoint's weights file, as a registry model's content hash
  if (!f.model.empty()) {
    model->load(f.model);  // refuses a checkpoint of another config
    weights_hash = sha256_file(train_family_named(o.arch).files(f.model).weights);
  }
  const int T = model->seq_len();
  std::vector<int32_t> inputs(size_t(f.batch) * T), targets(inputs.size());
  Rng rng(f.seed + 1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t(rng.below(kByteVocab));
    targets[i] = int32_t(rng.below(kByteVocab));
  }
  ExecCounters counters;
  StepStats first_step{};
  {
    CountingScope scope(counters);
    first_step = model->step(inputs.data(), targets.data(), 1, 1e-4, single_process());
  }
  const auto pass = [&] { model->step(inputs.data(), targets.data(), 1, 1e-4, single_process()); };
  const TimedPasses s = time_against_peak(pass, f.warmup, f.runs);
  report(f, "train", model->config_json(), o.arch + " L " + std::to_string(o.shape.layers) + " D " + std::to_string(o.shape.dim),
         T, s, double(counters.gemm_flops.load()), model->run_state_bytes(), weights_hash,
         profile_phases(pass, f.runs), first_step);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: tokens/s and GFLOP/s against the SGEMM peak");
  bench->require_subcommand(1);

  auto fwd = std::make_shared<BenchFlags>();
  CLI::App* forward = bench->add_subcommand("forward", "Time inference forward passes (live controller)");
  add_bench_flags(*forward, *fwd);
  add_precision_flag(*forward, fwd->precision);
  forward->add_option("--source", fwd->source, "Coefficient source: live (controller) or replay (recorded coefficients)")
      ->check(CLI::IsMember({"live", "replay"}))
      ->capture_default_str();
  forward->callback(naming_batch(fwd->batch, [fwd, forward] { bench_forward(*fwd, *forward); }));

  auto trn = std::make_shared<BenchFlags>();
  trn->runs = 10;
  CLI::App* train = bench->add_subcommand("train", "Time training steps (forward, backward, clipping, AdamW)");
  add_bench_flags(*train, *trn);
  train->callback(naming_batch(trn->batch, [trn, train] { bench_train(*trn, *train); }));
}

}  // namespace fca::cli
