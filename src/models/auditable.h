// The one narrow interface through which the audit (src/audit) sees a model: run windows with the
// live controller (optionally recording its coefficients) or with supplied coefficients, and give
// back per-window NLL and logits. Adding an architecture means implementing this, nothing in audit/.
// What only some families offer (a controller setting, record-dependent compute, a constraint,
// ablation groups, trace intermediates) is an optional capability (models/capabilities.h).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/json.h"
#include "models/coefficient_tensor.h"

namespace fca {

class AuditableModel {
 public:
  virtual ~AuditableModel() = default;

  virtual std::string family() const = 0;       // the registry name ("gated", "hyper", ...) or "external"
  virtual std::string description() const = 0;  // e.g. "featuregate L 6, D 256, H 4, T 256"
  virtual std::string content_hash() const = 0;  // SHA-256 of the weights file(s)
  virtual std::string config_json() const = 0;   // the checkpoint's config
  virtual size_t parameter_count() const = 0;
  virtual int max_tokens() const = 0;
  virtual int vocab() const = 0;

  // A text split's bytes as the model's token ids (bytes for byte-level models); `split` names it
  // in errors and in the external protocol.
  virtual std::vector<int32_t> tokenize(const std::string& split, std::span<const unsigned char> text) const = 0;

  // An all-zero coefficient tensor for `windows` windows of `tokens` tokens, with the validity mask.
  virtual CoefficientTensor make_coefficients(int windows, int tokens) const = 0;

  // Runs B windows [B, T] with the live controller; window_nll [B] receives each window's mean NLL.
  // With `record`, the coefficients go to its windows record_first .. record_first + B - 1.
  virtual void run_live(const int32_t* inputs, const int32_t* targets, int B, int T, CoefficientTensor* record,
                        int record_first, double* window_nll) = 0;
  // Runs B windows with the coefficients of `coefficients` windows 0 .. B-1; never the controller.
  virtual void run_replay(const int32_t* inputs, const int32_t* targets, int B, int T,
                          const CoefficientTensor& coefficients, double* window_nll) = 0;
  virtual size_t run_state_bytes() const = 0;  // activations of one pass, sized for the largest batch
  // A second copy of the weights held for speed (fca's families: packed for the GEMM, ops/gemm.h).
  virtual size_t packed_weights_bytes() const { return 0; }
  // True where the record is one residual gate per layer and token: its mean over a split is the
  // gate mass that evaluation reports (train/evaluate.h).
  virtual bool coefficients_are_gates() const { return false; }
  // True when a window's results do not depend on the batch it runs in, so the audit may choose the
  // batch for throughput: fca's gated and MUDD families, whose GEMMs and attention compute every row
  // from that row alone (ops/gemm.cpp; AuditEndToEnd.ResultsDoNotDependOnTheBatchSize). False by
  // default: an external model's batch stays fixed per audit.
  virtual bool batch_invariant() const { return false; }
  // Re-sizes the run state for up to max_batch windows (the audit's batch choice). A model that
  // cannot keeps its size; callers check max_batch().
  virtual void set_max_batch(int) {}
  virtual int max_batch() const = 0;
  // Logits [B, T, vocab] of the last run; null for a model whose logits stay in another process
  // (external adapters), which gives last_logits_sha256() instead.
  virtual const float* last_logits() const = 0;
  // Fills the logits of a B x T run with NaN (nothing, for logits that stay in another process), so
  // that a pass which writes no logits cannot compare equal to the pass before it: exact replay
  // poisons them before each pass it compares.
  virtual void poison_logits(int B, int T) = 0;
  // SHA-256 (hex) of the last run's logits as little-endian float32 bytes [B, T, vocab]; only for
  // models whose last_logits() is null.
  virtual std::string last_logits_sha256() const { return {}; }
  // Controller evaluations made by run_replay since construction (must stay 0).
  virtual int64_t replay_controller_evaluations() const = 0;
  // Who counted them, for audit.json: fca itself (its coefficient sources count every controller
  // call), or an external adapter that reports its counts.
  virtual std::string controller_evaluations_counted_by() const { return "fca (its coefficient sources)"; }
  // While enabled, a run_replay of the same windows as the model's last pass may start after the
  // part of the pass that precedes the first coefficient (models/prefix_reuse.h), with bitwise the
  // same results. The audit enables it for its condition replays only. Models without the ability
  // ignore it; prefix_reuses() counts the passes that did reuse.
  virtual void set_prefix_reuse(bool) {}
  virtual int64_t prefix_reuses() const { return 0; }

  // The coefficients that make the controller a no-op (gated: g = 1; MUDD: one-hot newest source),
  // written into window 0 of `out`.
  // Continuous coefficients only; the audit never asks a routed model (its table has no identity).
  virtual void identity_profile(CoefficientTensor& out) const;
  // False for a model that cannot say which coefficients make its controller a no-op (an external
  // adapter that gives none): the audit skips the identity condition and says why.
  virtual bool has_identity_profile() const { return true; }
  // structure_removed from the static profile S (window 0 of `static_profile`, constant over
  // tokens): gated GlobalMean, MUDD SourceUniformMean. Written into window 0 of `out`.
  // Continuous coefficients only (routing records use the randomised structure_removed).
  virtual void structure_removed_profile(const CoefficientTensor& static_profile, CoefficientTensor& out) const;
  // Names of the coefficient tensor's stream and source indices for tables and figures (MUDD: Q, K,
  // V, R and the sources' blocks; hyper: the read row and the streams, the branch output and the
  // streams); empty: numbered.
  virtual std::vector<std::string> stream_labels() const { return {}; }
  virtual std::vector<std::string> source_labels() const { return {}; }
  virtual std::string static_profile_name() const = 0;      // "LayerMean", "StaticMixMean"
  virtual std::string structure_removed_name() const = 0;   // "GlobalMean", "SourceUniformMean"
};

}  // namespace fca
