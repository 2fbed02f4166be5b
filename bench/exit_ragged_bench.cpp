// The ragged pass of the exit family (issue 27, docs/exit.md): how much of its counted
// FLOP saving against full depth becomes latency saving. Depths come from a trained exit checkpoint
// (its live pass at its threshold on evenly spaced test windows); the same depth records are then
// replayed by that model and by an initialised model of the same L, H and T at each other --dim
// (latency depends on the depth pattern and the shape, not on the weights' values), against the
// same model at full depth, timed in interleaved rounds (exec/timing.h). Efficiency = latency saving
// / FLOP saving (1.0: every saved FLOP saves time), with the interval of the latency ratio carried
// through. The live pass (classifier included) is timed too, for the trained model.
//
//   fca_exit_ragged_bench CHECKPOINT DATA_DIR [--dims 128,256] [--batch 8] [--rounds 30] [--budget 60]
//                         [--threshold LAMBDA]   (default: the checkpoint's)
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parse.h"
#include "core/threads.h"
#include "data/corpus.h"
#include "exec/exec.h"
#include "exec/timing.h"
#include "families/families.h"
#include "models/exit/figures.h"
#include "models/exit/forward.h"

namespace {

using namespace fca;

std::shared_ptr<CoefficientTensor> constant_depth(const ExitConfig& c, int B, int T, int depth) {
  auto r = std::make_shared<CoefficientTensor>(B, exit_record_shape(c, T));
  for (int b = 0; b < B; ++b)
    for (int k = 1; k <= c.exit_points(); ++k)
      for (int t = 0; t < T; ++t) r->discrete_at(b, k - 1, t, 0) = depth > k ? 1 : 0;
  return r;
}

std::vector<int32_t> depths_of(const CoefficientTensor& r) {
  const int T = r.shape().tokens;
  std::vector<int32_t> d(size_t(r.windows()) * T, 1);
  for (int w = 0; w < r.windows(); ++w)
    for (int k = 0; k < r.shape().layers; ++k)
      for (int t = 0; t < T; ++t) d[size_t(w) * T + t] += r.discrete_at(w, k, t, 0);
  return d;
}

int run(int argc, char** argv) {
  if (argc < 3) throw Error("usage: fca_exit_ragged_bench CHECKPOINT DATA_DIR [--dims 128,256] [--batch 8] [--rounds 30] [--budget 60]");
  install_families();
  std::vector<int> dims{128, 256};
  int B = 8, rounds = 30;
  double budget = 60, lambda = -1;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--dims") {
      dims.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) dims.push_back(int(parse_integer(item, "--dims", 16, 8192)));
    } else if (flag == "--batch") {
      B = int(parse_integer(value, "--batch", 1, 4096));
    } else if (flag == "--rounds") {
      rounds = int(parse_integer(value, "--rounds", 3, 100000));
    } else if (flag == "--budget") {
      budget = parse_number(value, "--budget", 0.0, 1e6);
    } else if (flag == "--threshold") {
      lambda = parse_number(value, "--threshold", 0.0, 1.0);
    } else {
      throw Error("unknown flag " + flag);
    }
  }
  set_threads(0);
  const ExitModel<float> trained = ExitModel<float>::load(argv[1]);
  const ExitConfig& tc = trained.config();
  if (lambda < 0) lambda = tc.exit_threshold;
  const int T = tc.seq_len;
  Corpus corpus(argv[2]);
  const TokenWindows windows = load_token_windows(corpus.split("test"), T, B);
  // The depth pattern: the trained model's live pass.
  const auto live_record = std::make_shared<CoefficientTensor>(B, exit_record_shape(tc, T));
  {
    ExitRunState<float> rs(tc, B, T);
    ExitRecordingDepth<float> recording(trained, lambda, *live_record);
    exit_forward(trained, rs, windows.inputs.data(), B, T, recording);
  }
  const std::vector<int32_t> depth = depths_of(*live_record);
  double mean_depth = 0;
  for (int32_t d : depth) mean_depth += double(d) / double(depth.size());
  std::printf("depths: %s at threshold %g on %d test windows of %d tokens: mean depth %.3f of %d\n", argv[1], lambda, B, T,
              mean_depth, tc.n_layer);
  std::printf("SGEMM peak %.0f GFLOP/s, %d threads\n\n", measure_sgemm_peak_gflops(), omp_get_max_threads());
  std::printf("| D | FLOP ratio (replay / full depth) | latency ratio [95%% interval] | efficiency = latency saving / FLOP saving [interval] | rounds |\n");
  std::printf("|---:|---:|---|---|---:|\n");
  for (int D : dims) {
    ExitConfig c = tc;
    c.d_model = D;
    const std::unique_ptr<ExitModel<float>> fresh =
        D == tc.d_model ? nullptr : std::make_unique<ExitModel<float>>(ExitModel<float>::initialized(c, 1));
    const ExitModel<float>& model = fresh ? *fresh : trained;
    ExitRunState<float> rs(c, B, T);
    const auto full = constant_depth(c, B, T, c.n_layer);
    ExitReplayedDepth<float> replay(c, *live_record), full_depth(c, *full);
    ExitLiveDepth<float> live(trained, lambda);
    std::vector<std::function<void()>> passes{
        [&] { exit_forward(model, rs, windows.inputs.data(), B, T, replay); },
        [&] { exit_forward(model, rs, windows.inputs.data(), B, T, full_depth); }};
    if (!fresh) passes.push_back([&] { exit_forward(model, rs, windows.inputs.data(), B, T, live); });
    InterleavedOptions io;
    io.min_rounds = rounds;
    io.max_rounds = rounds * 4;
    io.time_budget_s = budget;
    std::vector<std::pair<size_t, size_t>> ratios{{0, 1}};
    if (!fresh) ratios.push_back({2, 1});
    const InterleavedTiming timing = time_interleaved(passes.size(), [&](size_t i) { return time_once(passes[i]); }, ratios, io);
    const double flops = exit_pass_figures(c, depth.data(), B, T, false).total();
    const std::vector<int32_t> all(depth.size(), c.n_layer);
    const double full_flops = exit_pass_figures(c, all.data(), B, T, false).total();
    const double flop_ratio = flops / full_flops;
    auto line = [&](const char* what, const PairedRatio& r, double fr) {
      const double saving = 1.0 - fr;
      std::printf("| %d %s | %.3f | %.3f [%.3f, %.3f] | %.2f [%.2f, %.2f] | %d |\n", D, what, fr, r.estimate, r.low, r.high,
                  (1.0 - r.estimate) / saving, (1.0 - r.high) / saving, (1.0 - r.low) / saving, timing.rounds);
    };
    line("replay", paired_ratio(timing.seconds[0], timing.seconds[1]), flop_ratio);
    if (!fresh) {
      const double live_flops = exit_pass_figures(c, depth.data(), B, T, true).total();
      line("live", paired_ratio(timing.seconds[2], timing.seconds[1]), live_flops / full_flops);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fca_exit_ragged_bench: error: %s\n", e.what());
    return 1;
  }
}
