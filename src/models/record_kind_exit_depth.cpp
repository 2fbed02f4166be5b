// The exit_depth record kind (early exit, docs/exit.md): values = the classifier's q = sigmoid(s)
// [L-1, T, 1, 1] with the absorbing fill, discrete = continued c [L-1, T, 1] (c_{k,t} = 1 iff token
// t runs beyond exit point k). An executable record is 0/1, 1 below min_exit and non-increasing in
// k; its continuous view is c as 0/1 floats (token mean P(d > k)); the probe moves every token's
// whole depth one block deeper (one shallower at full depth), as one group: depths are per token.
#include "core/error.h"
#include "models/record_kind.h"
#include "models/routing_record.h"

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

std::vector<int> exit_depths(const CoefficientView& v, int window) {
  const int T = v.shape.tokens, P = v.shape.layers;
  std::vector<int> d(size_t(T), 1);
  const int32_t* c = v.window_discrete(window);
  for (int k = 0; k < P; ++k)
    for (int t = 0; t < T; ++t) d[size_t(t)] += c[int64_t(k) * T + t];
  return d;
}

void write_exit_depths(CoefficientTensor& out, int slot, const std::vector<int>& d) {
  const CoefficientShape& s = out.shape();
  if (s.kind != RecordKind::exit_depth || int(d.size()) != s.tokens)
    throw Error("internal error: exit depths for a record of shape " + s.to_string());
  for (int k = 1; k <= s.layers; ++k)
    for (int t = 0; t < s.tokens; ++t) {
      const int c = d[size_t(t)] > k ? 1 : 0;
      out.discrete_at(slot, k - 1, t, 0) = c;
      out.at(slot, k - 1, t) = float(1 - c);  // the absorbing fill: 0 while running (and below m), 1 once stopped
    }
}

namespace {

void check_exit_records(const CoefficientView& v, const std::string& where) {
  for (int w = 0; w < v.windows; ++w) check_exit_record(v.window_discrete(w), v.shape, where + ": window " + std::to_string(w));
}

CoefficientTensor continued_as_floats(const CoefficientView& v) {
  const CoefficientShape& s = v.shape;
  CoefficientTensor out(v.windows, CoefficientShape{s.layers, s.tokens, 1, 1});
  for (int w = 0; w < v.windows; ++w)
    for (int l = 0; l < s.layers; ++l)
      for (int t = 0; t < s.tokens; ++t) out.at(w, l, t) = float(v.window_discrete(w)[int64_t(l) * s.tokens + t]);
  return out;
}

void one_block_deeper(CoefficientTensor& c, int layer) {
  if (layer >= 0) throw Error("internal error: exit depths are probed as one group, not per layer");
  const CoefficientShape& s = c.shape();
  // Every token one block deeper, or one shallower where it ran them all (still a valid depth:
  // m <= L - 1), with its absorbing fill.
  for (int w = 0; w < c.windows(); ++w) {
    std::vector<int> d = exit_depths(c.view(), w);
    for (int& v : d) v = v < s.layers + 1 ? v + 1 : v - 1;
    write_exit_depths(c, w, d);
  }
}

}  // namespace

RecordKindRow exit_depth_record_kind() {
  return {RecordKind::exit_depth,
          "exit_depth",
          true,
          [](const CoefficientShape& s) { return std::string(" exit_depth (min exit ") + std::to_string(s.min_exit) + ")"; },
          [](nlohmann::ordered_json& record, const CoefficientShape& s) { record["min_exit"] = s.min_exit; },
          [](const JsonFields& record, CoefficientShape& s, const std::string& where) {
            if (!record.has("min_exit")) throw Error(where + ": cache manifest: an exit_depth record without 'min_exit'");
            s.min_exit = int(record.integer("min_exit", 0, 1, 1 << 16));
          },
          check_exit_records,
          continued_as_floats,
          flag_frequency,
          "every layer (exit depths are per token)",
          one_block_deeper,
          [](const CoefficientShape&) { return std::string(", every token's depth one block deeper (one shallower at full depth)"); }};
}

}  // namespace fca
