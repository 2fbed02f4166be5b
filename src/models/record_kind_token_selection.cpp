// The token_selection record kind (MoD, docs/routed.md): values = sigmoid(s) [R, T, 1, 1],
// discrete = selected 0/1 [R, T, 1]. An executable record selects exactly K tokens per (window,
// routed block); its continuous view is the values; its load is the share of windows selecting each
// position; the probe moves every selection one token later, cyclically (still K per window).
#include "core/error.h"
#include "models/record_kind.h"

namespace fca {
namespace {

void check_selection_records(const CoefficientView& v, const std::string& where) {
  const CoefficientShape& s = v.shape;
  for (int w = 0; w < v.windows; ++w) {
    const int32_t* d = v.window_discrete(w);
    for (int l = 0; l < s.layers; ++l) {
      int count = 0;
      for (int t = 0; t < s.tokens; ++t) {
        const int32_t* rec = d + (int64_t(l) * s.tokens + t) * s.slots;
        const std::string at = where + ": window " + std::to_string(w) + ", layer " + std::to_string(l) + ", token " + std::to_string(t);
        if (rec[0] != 0 && rec[0] != 1) throw Error(at + ": selected is " + std::to_string(rec[0]) + ", expected 0 or 1");
        count += rec[0];
      }
      if (count != s.selected)
        throw Error(where + ": window " + std::to_string(w) + ", layer " + std::to_string(l) + " selects " +
                    std::to_string(count) + " tokens, expected K = " + std::to_string(s.selected));
    }
  }
}

void next_token(CoefficientTensor& c, int layer) {
  const CoefficientShape& s = c.shape();
  const int l0 = layer < 0 ? 0 : layer, l1 = layer < 0 ? s.layers : layer + 1;
  std::vector<int32_t> row(size_t(s.tokens));
  for (int w = 0; w < c.windows(); ++w)
    for (int l = l0; l < l1; ++l) {
      for (int t = 0; t < s.tokens; ++t) row[size_t(t)] = c.discrete_at(w, l, t, 0);
      for (int t = 0; t < s.tokens; ++t) c.discrete_at(w, l, (t + 1) % s.tokens, 0) = row[size_t(t)];
    }
}

}  // namespace

RecordKindRow token_selection_record_kind() {
  return {RecordKind::token_selection,
          "token_selection",
          true,
          discrete_shape_words,
          nullptr,
          nullptr,
          check_selection_records,
          record_values,
          flag_frequency,
          nullptr,
          next_token,
          [](const CoefficientShape&) { return std::string(", every token selection moved one token later (cyclically)"); }};
}

}  // namespace fca
