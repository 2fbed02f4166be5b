// Helpers shared by the tests: temporary folders, small corpora, tiny models, running the CLI.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"

#include "models/base/tensor_slot.h"
#include "models/gated/config.h"
#include "train/trainer.h"

namespace fca::testing {

// A fresh empty folder under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_text(const std::string& path, const std::string& content);
std::string read_bytes(const std::string& path);
// Writes train/valid/test .txt of pseudo-English text (deterministic) with the given byte counts.
void write_corpus(const std::string& dir, size_t train_bytes, size_t valid_bytes, size_t test_bytes);
// n values uniform in [-1, 1) from std::mt19937(seed): the operands of the GEMM tests.
std::vector<float> uniform_values(size_t n, uint32_t seed);
// A small config of the given gate kind (L 2, D 16, H 2, T 16).
GatedConfig tiny_config(GateKind kind);
// Sets the run's family, shape and settings to train a gated model of config c.
void train_gated(TrainOptions& o, const GatedConfig& c);
// Training options for a tiny byte-level MUDD model (L n_layer, D 16, H 2, T 16), 10 steps of
// batch 4, written to the folder `out`.
TrainOptions tiny_mudd_training(const std::string& out, int n_layer = 2);

// Golden-fixture comparison: |ours - reference| <= atol + rtol * max|reference| over the tensor.
// The default tolerances are derived in test_util.cpp.
void expect_close(const std::string& what, const float* ours, const std::vector<double>& ref, double rtol = 2e-5,
                  double atol = 1e-6);

// Backward against central differences in double for every tensor of `layout`: up to 12 elements
// per tensor (all of a smaller one; otherwise chosen by Rng(pick_seed)), each nudged by +-1e-5 through
// param(slot) and the loss re-evaluated by loss_at(); grad(slot) holds the analytic gradient. Step
// 1e-5: truncation ~h^2 |f'''| ~ 1e-10, rounding ~1e-16 / h ~ 1e-11; tolerance 1e-7 + 1e-5 |g|.
// `skip(slot, i)` (optional) leaves out elements the model never reads.
void expect_gradients_match_finite_differences(const std::vector<TensorSlot>& layout,
                                               const std::function<double*(const TensorSlot&)>& param,
                                               const std::function<const double*(const TensorSlot&)>& grad,
                                               const std::function<double()>& loss_at, uint64_t pick_seed,
                                               const std::function<bool(const TensorSlot&, size_t)>& skip = {});

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};
// Runs the built fca binary with the given arguments (shell-quoted here); with ranks > 0, as that
// many MPI ranks under mpirun.
CommandResult run_fca(const std::vector<std::string>& args, int ranks = 0);
// Runs a shell command (its stderr joined to its stdout): its exit status and its output.
std::pair<int, std::string> run_shell(const std::string& cmd);

// The Python with Debian's python3-torch (make test installs it; CMake's FCA_PYTHON), and whether it
// imports torch and numpy.
std::string python();
bool python_has_torch();
// A path in the source tree.
std::string source(const std::string& relative);
nlohmann::json read_json(const std::string& path);

}  // namespace fca::testing
