// The `exit` family, token-level early exit (docs/exit.md, format fca-exit-v1):
// the gated family's Dense trunk (g = 1) with CALM-style exits: after block k (min_exit <= k <=
// L-1) a linear classifier on LayerNorm(h_k; ln_f) decides whether the token stops there; every
// exit shares ln_f and the tied head. Config, parameter layout, read-only weights.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/base/block.h"
#include "models/flat_model.h"
#include "models/parameters.h"

namespace fca {

inline constexpr const char* kExitFormat = "fca-exit-v1";
// The family's own execution counter (core/exec_counters.h, declared by exit_exec_family): K/V rows
// projected for exited tokens, summed over blocks.
inline constexpr const char* kPropagatedRows = "propagated_rows";
// The family's run-time settings (models/run_setting.h): the audit's live threshold, and exec's sweep.
inline constexpr const char* kExitThreshold = "exit_threshold";
inline constexpr const char* kExitThresholds = "exit_thresholds";

struct ExitConfig {
  int n_layer = 6;   // L
  int d_model = 128;  // D
  int n_head = 4;     // H
  int seq_len = 128;  // T
  int min_exit = 1;   // m, 1 <= m <= L-1: the earliest depth a token may stop at
  double exit_threshold = 0.9;  // lambda: an inference knob, stored as the default of eval/audit/exec
  int exit_head_steps = 200;    // phase-2 steps (provenance of how the classifiers were trained)

  int head_dim() const { return d_model / n_head; }
  int exit_points() const { return n_layer - 1; }  // rows of exit.weight: exit point k is row k-1
  // Exits supervised in phase 1: k = m..L (the last is the full-depth head).
  int supervised_exits() const { return n_layer - min_exit + 1; }
  // CALM's linear loss weights w_k = k / sum_{i=m..L} i.
  double exit_loss_weight(int k) const;
  void validate(const std::string& where) const;
  std::string to_json() const;
  static ExitConfig from_json(const std::string& text, const std::string& where);
  bool operator==(const ExitConfig&) const = default;
};

std::vector<TensorSlot> exit_tensor_layout(const ExitConfig& config);

template <typename T>
struct ExitWeights {
  T *wte, *wpe;  // [256, D] (also the tied head), [T, D]
  std::vector<BlockWeights<T>> blocks;
  T *ln_f_weight, *ln_f_bias;  // [D], shared by every exit
  T* exit_weight;              // [L-1, D]: row k-1 = the classifier of exit point k (rows k < m stay 0)
  T* exit_bias;                // [L-1]
};

// The family's part of FlatModel (models/flat_model.h). Initialisation: the trunk as the gated
// family's (same draws from the same seed), exit.* = 0 (score 0, q = 0.5).
struct ExitSpec {
  using Config = ExitConfig;
  template <typename T>
  using Weights = ExitWeights<T>;
  static constexpr const char* kFormat = kExitFormat;
  static std::vector<TensorSlot> layout(const ExitConfig& c) { return exit_tensor_layout(c); }
  template <typename T>
  static ExitWeights<T> bind(ParameterBuffer<T>& params, const ExitConfig& c);
  static std::string describe(const ExitConfig& c);
};

template <typename T>
using ExitModel = FlatModel<T, ExitSpec>;

// tau = ln(lambda / (1 - lambda)) computed in double and rounded to float once; +inf for lambda >= 1
// and -inf for lambda <= 0 (docs/exit.md). A token exits at point k iff its score s >= tau.
float exit_logit_threshold(double lambda);

}  // namespace fca
