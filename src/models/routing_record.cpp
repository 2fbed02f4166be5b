#include "models/routing_record.h"

#include <cstring>

#include "core/error.h"

namespace fca {

void check_exit_record(const int32_t* continued, const CoefficientShape& s, const std::string& where) {
  for (int t = 0; t < s.tokens; ++t)
    for (int k = 1; k <= s.layers; ++k) {  // exit point k is record layer k-1
      const int32_t c = continued[int64_t(k - 1) * s.tokens + t];
      const auto at = [&] { return where + ", exit point " + std::to_string(k) + ", token " + std::to_string(t); };
      if (c != 0 && c != 1) throw Error(at() + ": continued is " + std::to_string(c) + ", expected 0 or 1");
      if (k < s.min_exit && c != 1)
        throw Error(at() + ": continued is 0 below the first exit point " + std::to_string(s.min_exit));
      if (k > 1 && c == 1 && continued[int64_t(k - 2) * s.tokens + t] == 0)
        throw Error(at() + ": continued is 1 after the token exited (a depth record is non-increasing)");
    }
}

void check_routing_records(const CoefficientView& v, const std::string& where) {
  const CoefficientShape& s = v.shape;
  if (s.kind == RecordKind::continuous) return;
  if (v.discrete == nullptr) throw Error(where + ": routing records without their discrete field");
  if (s.kind == RecordKind::exit_depth) {
    for (int w = 0; w < v.windows; ++w) check_exit_record(v.window_discrete(w), s, where + ": window " + std::to_string(w));
    return;
  }
  for (int w = 0; w < v.windows; ++w) {
    const int32_t* d = v.window_discrete(w);
    for (int l = 0; l < s.layers; ++l) {
      int count = 0;
      for (int t = 0; t < s.tokens; ++t) {
        const int32_t* rec = d + (int64_t(l) * s.tokens + t) * s.slots;
        const std::string at = where + ": window " + std::to_string(w) + ", layer " + std::to_string(l) + ", token " + std::to_string(t);
        if (s.kind == RecordKind::expert_routing) {
          for (int j = 0; j < s.slots; ++j) {
            if (rec[j] < 0 || rec[j] >= s.categories)
              throw Error(at + ": expert index " + std::to_string(rec[j]) + " is outside [0, " + std::to_string(s.categories) + ")");
            for (int i = 0; i < j; ++i)
              if (rec[i] == rec[j]) throw Error(at + ": expert " + std::to_string(rec[j]) + " is selected twice");
          }
        } else {
          if (rec[0] != 0 && rec[0] != 1) throw Error(at + ": selected is " + std::to_string(rec[0]) + ", expected 0 or 1");
          count += rec[0];
        }
      }
      if (s.kind == RecordKind::token_selection && count != s.selected)
        throw Error(where + ": window " + std::to_string(w) + ", layer " + std::to_string(l) + " selects " +
                    std::to_string(count) + " tokens, expected K = " + std::to_string(s.selected));
    }
  }
}

CoefficientTensor routing_weights_dense(const CoefficientView& v) {
  const CoefficientShape& s = v.shape;
  if (s.kind == RecordKind::exit_depth) {  // continued c as float: its token mean is P(d > k)
    CoefficientTensor out(v.windows, CoefficientShape{s.layers, s.tokens, 1, 1});
    for (int w = 0; w < v.windows; ++w)
      for (int l = 0; l < s.layers; ++l)
        for (int t = 0; t < s.tokens; ++t) out.at(w, l, t) = float(v.window_discrete(w)[int64_t(l) * s.tokens + t]);
    return out;
  }
  if (s.kind != RecordKind::expert_routing) {
    CoefficientTensor out(v.windows, CoefficientShape{s.layers, s.tokens, s.streams, s.sources});
    std::memcpy(out.values().data(), v.data, sizeof(float) * out.values().size());
    return out;
  }
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

std::vector<std::vector<double>> routing_load(const CoefficientView& v) {
  const CoefficientShape& s = v.shape;
  if (s.kind == RecordKind::continuous) return {};
  const int width = s.kind == RecordKind::expert_routing ? s.categories : s.tokens;
  std::vector<std::vector<double>> load(size_t(s.layers), std::vector<double>(size_t(width), 0.0));
  const double per = s.kind == RecordKind::expert_routing ? 1.0 / (double(v.windows) * s.tokens * s.slots) : 1.0 / v.windows;
  for (int w = 0; w < v.windows; ++w) {
    const int32_t* d = v.window_discrete(w);
    for (int l = 0; l < s.layers; ++l)
      for (int t = 0; t < s.tokens; ++t) {
        const int32_t* rec = d + (int64_t(l) * s.tokens + t) * s.slots;
        if (s.kind == RecordKind::expert_routing)
          for (int j = 0; j < s.slots; ++j) load[size_t(l)][size_t(rec[j])] += per;
        else if (rec[0] == 1)
          load[size_t(l)][size_t(t)] += per;
      }
  }
  return load;
}

}  // namespace fca
