// The expert_routing record kind (MoE, docs/routed.md): values = the selected experts' weights
// [L, T, 1, k], discrete = their indices [L, T, k]. An executable record has k distinct indices in
// [0, E) per token; its continuous view is the dense E-vector of weights per token; its load is the
// share of (token, slot) assignments per expert; the probe moves every index e to (e + 1) mod E.
#include "core/error.h"
#include "models/record_kind.h"

namespace fca {
namespace {

void check_expert_records(const CoefficientView& v, const std::string& where) {
  const CoefficientShape& s = v.shape;
  for (int w = 0; w < v.windows; ++w) {
    const int32_t* d = v.window_discrete(w);
    for (int l = 0; l < s.layers; ++l)
      for (int t = 0; t < s.tokens; ++t) {
        const int32_t* rec = d + (int64_t(l) * s.tokens + t) * s.slots;
        const std::string at = where + ": window " + std::to_string(w) + ", layer " + std::to_string(l) + ", token " + std::to_string(t);
        for (int j = 0; j < s.slots; ++j) {
          if (rec[j] < 0 || rec[j] >= s.categories)
            throw Error(at + ": expert index " + std::to_string(rec[j]) + " is outside [0, " + std::to_string(s.categories) + ")");
          for (int i = 0; i < j; ++i)
            if (rec[i] == rec[j]) throw Error(at + ": expert " + std::to_string(rec[j]) + " is selected twice");
        }
      }
  }
}

CoefficientTensor expert_weights_dense(const CoefficientView& v) {
  const CoefficientShape& s = v.shape;
  CoefficientTensor out(v.windows, CoefficientShape{s.layers, s.tokens, 1, s.categories});
  for (int w = 0; w < v.windows; ++w) {
    const float* vals = v.window_data(w);
    const int32_t* d = v.window_discrete(w);
    for (int l = 0; l < s.layers; ++l)
      for (int t = 0; t < s.tokens; ++t) {
        const int64_t rec = int64_t(l) * s.tokens + t;
        for (int j = 0; j < s.slots; ++j) out.at(w, l, t, 0, d[rec * s.slots + j]) = vals[rec * s.sources + j];
      }
  }
  return out;
}

std::vector<std::vector<double>> expert_load(const CoefficientView& v) {
  const CoefficientShape& s = v.shape;
  std::vector<std::vector<double>> load(size_t(s.layers), std::vector<double>(size_t(s.categories), 0.0));
  const double per = 1.0 / (double(v.windows) * s.tokens * s.slots);
  for (int w = 0; w < v.windows; ++w) {
    const int32_t* d = v.window_discrete(w);
    for (int l = 0; l < s.layers; ++l)
      for (int t = 0; t < s.tokens; ++t) {
        const int32_t* rec = d + (int64_t(l) * s.tokens + t) * s.slots;
        for (int j = 0; j < s.slots; ++j) load[size_t(l)][size_t(rec[j])] += per;
      }
  }
  return load;
}

void next_expert(CoefficientTensor& c, int layer) {
  const CoefficientShape& s = c.shape();
  const int l0 = layer < 0 ? 0 : layer, l1 = layer < 0 ? s.layers : layer + 1;
  for (int w = 0; w < c.windows(); ++w)
    for (int l = l0; l < l1; ++l)
      for (int t = 0; t < s.tokens; ++t)
        for (int k = 0; k < s.slots; ++k) c.discrete_at(w, l, t, k) = (c.discrete_at(w, l, t, k) + 1) % s.categories;
}

}  // namespace

RecordKindRow expert_routing_record_kind() {
  return {RecordKind::expert_routing,
          "expert_routing",
          true,
          discrete_shape_words,
          nullptr,
          nullptr,
          check_expert_records,
          expert_weights_dense,
          expert_load,
          nullptr,
          next_expert,
          [](const CoefficientShape& s) { return ", every expert index e by (e + 1) mod " + std::to_string(s.categories); }};
}

}  // namespace fca
