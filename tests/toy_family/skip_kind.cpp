// The skip family's record kind, block_skip, in the three parts of the record-kind table, each
// installed by the family with one call (models/record_kind.h's add_record_kind, audit/audit_kind.h's
// add_audit_kind, report/report_kind.h's add_report_kind), none written into src/:
// - models: values g and a discrete ran flag c in {0, 1} per (layer, token); the load is each
//   block's run frequency per position; the probe flips every flag of a layer;
// - audit: the routing conditions (audit/routing_conditions.h), a moved route keeping the token's
//   own g; structure_removed runs each (layer, token) with the layer's calibration run rate; the
//   layer x position profile runs where the calibration ran at least half the time, the static
//   profile runs a layer's every token where the layer ran at least half the time, each with the
//   mean g;
// - report: the run frequency, block x position.
#include "toy_family/skip_kind.h"

#include <numeric>

#include "audit/routing_conditions.h"
#include "core/error.h"
#include "models/record_kind.h"
#include "models/routing_record.h"
#include "report/report_kind.h"
#include "report/report_util.h"
#include "report/svg.h"
#include "toy_family/skip_model.h"

namespace fca::toy {
namespace {

RecordKind installed_kind = RecordKind::continuous;
bool installed = false;

void check_flags(const CoefficientView& v, const std::string& where) {
  const CoefficientShape& s = v.shape;
  for (int w = 0; w < v.windows; ++w)
    for (int l = 0; l < s.layers; ++l)
      for (int t = 0; t < s.tokens; ++t) {
        const int32_t c = v.window_discrete(w)[int64_t(l) * s.tokens + t];
        if (c != 0 && c != 1)
          throw Error(where + ": window " + std::to_string(w) + ", layer " + std::to_string(l) + ", token " + std::to_string(t) +
                      " has ran flag " + std::to_string(c) + " (a block_skip flag is 0 or 1)");
      }
}

void flip_flags(CoefficientTensor& c, int layer) {
  const CoefficientShape& s = c.shape();
  const int l0 = layer < 0 ? 0 : layer, l1 = layer < 0 ? s.layers : layer + 1;
  for (int w = 0; w < c.windows(); ++w)
    for (int l = l0; l < l1; ++l)
      for (int t = 0; t < s.tokens; ++t) c.discrete_at(w, l, t, 0) = 1 - c.discrete_at(w, l, t, 0);
}

RecordKindRow models_row() {
  return {RecordKind::continuous,  // replaced by add_record_kind
          "block_skip",
          true,
          discrete_shape_words,
          nullptr,
          nullptr,
          check_flags,
          record_values,
          flag_frequency,
          nullptr,
          flip_flags,
          [](const CoefficientShape&) { return std::string(", every ran flag of the layer flipped"); }};
}

// A moved route: token t runs as token sigma[t] of `from` ran, with its own g.
class MovedRuns : public AssignmentCondition {
 public:
  using AssignmentCondition::AssignmentCondition;

 protected:
  void move_layer(CoefficientTensor& out, int slot, int l, int, const int32_t* from, const std::vector<int>& sigma) const override {
    const int T = A_.shape.tokens;
    for (int t = 0; t < T; ++t) out.discrete_at(slot, l, t, 0) = from[int64_t(l) * T + sigma[size_t(t)]];
  }
};

// Each (layer, token) runs with probability run_rate[l], with its own g.
class RandomRuns : public RandomRoutingCondition {
 public:
  RandomRuns(const CoefficientView& A, const AuditRandomness& rand, const std::vector<double>& run_rate)
      : RandomRoutingCondition(A, rand), run_rate_(run_rate) {}

 protected:
  void draw_layer(CoefficientTensor& out, int slot, int l, Rng& rng) const override {
    for (int t = 0; t < A_.shape.tokens; ++t) out.discrete_at(slot, l, t, 0) = rng.uniform() < run_rate_[size_t(l)] ? 1 : 0;
  }

 private:
  const std::vector<double>& run_rate_;
};

class SkipConditions : public RoutingConditions {
 public:
  explicit SkipConditions(const CoefficientView& C) : RoutingConditions(C.shape) {
    const CoefficientShape& s = C.shape;
    if (C.windows <= 0) throw Error("calibration set is empty");
    const int T = s.tokens;
    run_rate_.assign(size_t(s.layers), 0.0);
    for (int l = 0; l < s.layers; ++l) {
      double layer_g = 0;
      for (int t = 0; t < T; ++t) {
        double ran = 0, g = 0;
        for (int w = 0; w < C.windows; ++w) {
          ran += C.window_discrete(w)[int64_t(l) * T + t];
          g += C.window_data(w)[int64_t(l) * T + t];
        }
        layer_position_mean_.at(0, l, t) = float(g / C.windows);
        layer_position_mean_.discrete_at(0, l, t, 0) = ran / C.windows >= 0.5 ? 1 : 0;
        run_rate_[size_t(l)] += ran / (double(C.windows) * T);
        layer_g += g;
      }
      for (int t = 0; t < T; ++t) {
        static_profile_.at(0, l, t) = float(layer_g / (double(C.windows) * T));
        static_profile_.discrete_at(0, l, t, 0) = run_rate_[size_t(l)] >= 0.5 ? 1 : 0;
      }
    }
  }

 protected:
  std::unique_ptr<Condition> assignment(const std::string& name, const CoefficientView& A, const AuditRandomness& rand,
                                        bool cross) const override {
    return std::make_unique<MovedRuns>(name, A, rand, cross);
  }
  std::unique_ptr<Condition> random_routes(const CoefficientView& A, const AuditRandomness& rand) const override {
    return std::make_unique<RandomRuns>(A, rand, run_rate_);
  }

 private:
  std::vector<double> run_rate_;
};

AuditKindRow audit_row(RecordKind kind) {
  return {.kind = kind,
          .condition_names = routing_condition_names(),
          .randomized = routing_randomized_conditions(),
          .skipped = routing_skipped_conditions,
          .model_conditions = nullptr,
          .prepare = [](const AuditableModel&, const CoefficientView& C) -> std::unique_ptr<KindConditions> {
            return std::make_unique<SkipConditions>(C);
          },
          .routing_json = [](const CoefficientView& A, const CacheManifest&, const std::vector<ConditionRun>&) {
            return routing_load_json(A, 0, "run_frequency", "share of evaluation windows in which each block ran on each position");
          },
          .shortened_tokens = nullptr,
          .full_computation_condition = nullptr};
}

// The run frequency, block x position, from audit.json's routing.run_frequency.
std::string run_frequency_figure(const ReportData& d, const ReportData::Named& a) {
  const auto& m = a.doc.at("routing").at("run_frequency");
  const int L = int(m.size()), T = L > 0 ? int(m[0].size()) : 0;
  const int cell_w = std::max(1, 640 / std::max(1, T)), cell_h = 18, left = 90, top = 30;
  svg::Canvas cv(left + cell_w * T + 40, top + cell_h * L + 30, "Block runs: " + report_util::audit_heading(d, a.doc));
  cv.text(left, 16, report_util::audit_heading(d, a.doc) + ": run frequency, block x position (share of windows)", "start", 11,
          "#333", true);
  for (int l = 0; l < L; ++l)
    for (int t = 0; t < T; ++t) {
      const double x = m[size_t(l)][size_t(t)].get<double>();
      cv.rect(left + cell_w * t, top + cell_h * l, cell_w, cell_h, svg::sequential(x),
              "block " + std::to_string(l) + ", position " + std::to_string(t) + ": " + report_util::fmt("%.3f", x));
    }
  return cv.str();
}

}  // namespace

RecordKind block_skip_kind() {
  if (!installed) throw Error("the block_skip record kind is not installed (install_skip_family)");
  return installed_kind;
}

void install_block_skip_kind() {
  if (installed) return;
  installed_kind = add_record_kind(models_row());
  installed = true;
  add_audit_kind(audit_row(installed_kind));
  add_report_kind({"block_skip", run_frequency_figure});
}

}  // namespace fca::toy
