// Hyper-connection models behind the audit's interface (models/auditable.h): coefficients
// [site 2L, token, n+1, n+1] with (0, 0) masked; identity = the initialisation's squares (read
// one-hot at r(p), writes 1, mixing I: plain Pre-Norm, docs/hyper.md); structure_removed = the grouped
// source-uniform mean (docs/hyper.md: reads averaged over the streams, writes kept, each row's mixing
// entries averaged).
#pragma once
#include <memory>

#include "models/family_auditable.h"
#include "models/hyper/forward.h"
#include "models/registry.h"

namespace fca {

struct HyperAuditTraits {
  using Model = HyperModel<float>;
  using RunState = HyperRunState<float>;
  using Live = HyperLiveCoefficients<float>;
  using Recording = HyperRecordingCoefficients<float>;
  using Replayed = HyperReplayedCoefficients<float>;
  static RunState run_state(const Model& m, int B, int T, bool keep_all) {
    return RunState(m.config(), B, std::min(T, m.config().seq_len), keep_all);
  }
  static Replayed replayed(const Model&, const CoefficientTensor& c) { return Replayed(c); }
  static void forward(const Model& m, RunState& rs, const int32_t* x, int B, int T, HyperCoefficientSource<float>& s, int first) {
    hyper_forward(m, rs, x, B, T, s, first);
  }
  static void loss(RunState& rs, const int32_t* y, double* nll) { hyper_loss(rs, y, nll); }
};

// Capabilities (models/capabilities.h): mHC's constraint, the cache's diagnostics and [mHC]'s
// ablation groups.
class HyperAuditable : public FamilyAuditable<HyperAuditTraits>,
                       public CoefficientConstraint,
                       public CacheDiagnostics,
                       public AblationGroups {
 public:
  HyperAuditable(const std::string& path, int max_batch, int max_tokens);

  std::string family() const override { return "hyper"; }
  std::string description() const override;
  std::string content_hash() const override { return hash_; }
  std::string config_json() const override { return model_.config().to_json(); }
  size_t parameter_count() const override { return layout_parameter_count(model_.layout()); }
  int max_tokens() const override { return model_.config().seq_len; }
  int vocab() const override { return kByteVocab; }
  std::vector<int32_t> tokenize(const std::string&, std::span<const unsigned char> text) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  CoefficientTensor make_coefficients(int windows, int tokens) const override {
    return hyper_coefficient_tensor(model_.config(), windows, tokens);
  }
  void identity_profile(CoefficientTensor& out) const override;
  void structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const override;
  const float* last_position_losses() const override { return rs_->losses; }
  // hc.streams.{p} [B, T, n, D] for p = 0 .. 2L (the streams entering site p; 2L: after the last),
  // hc.read.{p} [B, T, D] (the branch input a_p), hidden.1 [B, T, D] (the collapsed state that
  // ln_f normalises). Needs set_keep_intermediates(true) before set_max_batch (fca trace asks).
  std::vector<TraceTensor> trace_tensors(int B, int T, bool live) const override;
  std::string static_profile_name() const override { return "StaticSquareMean"; }
  // Rows: the read (the branch input), then the n new streams; columns: the branch output, then the
  // n old streams (docs/hyper.md).
  std::vector<std::string> stream_labels() const override;
  // mHC only: its mixing is doubly stochastic live; the audit reports max |column sum - 1| of what
  // each condition replayed (docs/hyper.md).
  std::string coefficient_constraint() const override;
  double constraint_violation(const CoefficientView& coefficients, int window) const override;
  nlohmann::ordered_json cache_diagnostics(const CoefficientView& evaluation) const override;
  std::vector<std::string> source_labels() const override;
  // [mHC]'s ablation as replays (docs/hyper.md): the read (row 0) at 1/n per stream, the writes (column 0)
  // at 1, the mixing block at I, one group at a time, the others as cached.
  std::vector<std::string> disable_groups() const override { return {"read", "write", "mixing"}; }
  void disabled_profile(CoefficientTensor& values) const override;
  int disable_group_of(int layer, int stream, int source) const override;
  std::string structure_removed_name() const override { return "GroupUniformMean"; }

 private:
  std::string hash_;
};

// The family's entry in the model registry (models/registry.h): "hyper", format fca-hyper-v1,
// labelled by variant and streams ("dhc n4").
ModelFamily hyper_model_family();

}  // namespace fca
