// Exit models behind the audit's interface (models/auditable.h): records of kind exit_depth
// [L-1, T, 1, 1] (score q) + [L-1, T, 1] (continued); replay never evaluates a classifier. Live
// runs use the config's exit_threshold.
#pragma once
#include "models/capabilities.h"
#include "models/exit/forward.h"
#include "models/family_auditable.h"
#include "models/registry.h"

namespace fca {

struct ExitAuditTraits {
  using Model = ExitModel<float>;
  using RunState = ExitRunState<float>;
  using Live = ExitLiveDepth<float>;
  using Recording = ExitRecordingDepth<float>;
  using Replayed = ExitReplayedDepth<float>;
  static RunState run_state(const Model& m, int B, int T) { return RunState(m.config(), B, std::min(T, m.config().seq_len)); }
  static Replayed replayed(const Model& m, const CoefficientTensor& c) { return Replayed(m.config(), c); }
  static void forward(const Model& m, RunState& rs, const int32_t* x, int B, int T, ExitDepthSource<float>& s, int first) {
    exit_forward(m, rs, x, B, T, s, first);
  }
  static void loss(RunState& rs, const int32_t* y, double* nll) { exit_loss(rs, y, nll); }
  static constexpr const char* kFamily = "exit";
  static constexpr const char* kStaticProfile = "DepthHistogram";
  static constexpr const char* kStructureRemoved = "MeanDepth";
  static CoefficientShape record_shape(const ExitConfig& c, int tokens) { return exit_record_shape(c, tokens); }
  static std::string describe(const ExitConfig& c);
};

// Capabilities (models/capabilities.h): the threshold as its controller setting, and the compute
// its records select.
class ExitAuditable : public ByteLevelAuditable<ExitAuditTraits>, public ControllerSetting, public RecordDependentCompute {
 public:
  ExitAuditable(const std::string& path, int max_batch, int max_tokens)
      : ByteLevelAuditable<ExitAuditTraits>(path, max_batch, max_tokens), threshold_(model_.config().exit_threshold) {}
  // Rows never depend on the batch: row-independent GEMMs and attention (docs/exit.md), tested.
  bool batch_invariant() const override { return true; }
  // Live runs at the threshold lambda (the config's unless set): "exit_threshold <lambda>".
  std::string controller_setting() const override;
  void set_controller_setting(const std::string& key, double value) override;
  void run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record, int record_first,
                double* window_nll) override;
  RecordCompute record_compute(const CoefficientView& records, int windows) const override;

 private:
  double threshold_;
};

// The family's entry in the model registry (models/registry.h): "exit", format fca-exit-v1,
// labelled "exit m<min_exit> λ<threshold>".
ModelFamily exit_model_family();

}  // namespace fca
