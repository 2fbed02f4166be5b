// The report's verdicts and figures (inline SVG).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "report/report.h"
#include "report/svg.h"

namespace fca {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

const nlohmann::json* find_condition(const nlohmann::json& audit, const std::string& name) {
  for (const auto& c : audit["conditions"])
    if (c["name"] == name) return &c;
  return nullptr;
}

// The exec entry of a model (matched by weights hash) and, when present, the dense reference.
const nlohmann::json* find_exec(const ReportData& d, const std::string& sha) {
  for (const auto& e : d.execs)
    for (const auto& m : e.doc["models"])
      if (m["model_sha256"] == sha) return &m;
  return nullptr;
}

std::string short_name(const nlohmann::json& audit) { return audit["model"]["description"].get<std::string>(); }

// The aggregate among the inputs that combines this checkpoint with others, or null.
const ReportData::Named* find_aggregate(const ReportData& d, const std::string& sha256) {
  for (const auto& g : d.aggregates)
    for (const auto& in : g.doc["inputs"])
      if (in.value("model_sha256", "") == sha256) return &g;
  return nullptr;
}

// Claims 1 and 2 from an aggregate: the checkpoint-level means and bootstrap CIs, and the
// criteria it applied to them.
void aggregate_verdicts(const nlohmann::json& g, Verdicts& v) {
  const auto& f = g["figures"];
  auto mean_of = [&](const std::string& name) { return f.contains(name) && !f[name].contains("undefined") ? f[name]["mean"].get<double>() : std::nan(""); };
  const double coordinate = mean_of("variance_share.coordinate");
  const double dynamic = std::max(0.0, 1.0 - coordinate);
  v.varies = std::isfinite(coordinate) && dynamic >= 0.01;
  v.variation = (v.varies ? "Coefficients vary with input and position: " : "Coefficients are essentially static: ") +
                fmt("%.1f%%", 100 * dynamic) + " of their variance is input- or token-dependent, mean over " +
                std::to_string(g["checkpoints"].get<int>()) + " checkpoints (input " + fmt("%.1f%%", 100 * mean_of("variance_share.input")) +
                ", token " + fmt("%.1f%%", 100 * mean_of("variance_share.token")) + ").";
  if (!f.contains("delta_nll.static_profile") || f["delta_nll.static_profile"].contains("undefined") ||
      !g.contains("criteria") || !g["criteria"].contains("static_penalty_small")) {
    v.dependence = "Not assessed: the aggregate has no checkpoint-level static_profile penalty.";
    return;
  }
  const auto& st = f["delta_nll.static_profile"];
  const auto& crit = g["criteria"]["static_penalty_small"];
  const double lo = st["ci95"][0], hi = st["ci95"][1], threshold = crit["threshold"];
  const bool small = crit["holds"].get<bool>();
  const bool depends = lo > threshold;
  v.needs_dynamic = depends;
  std::string ret;
  if (f.contains("retention.static_profile") && !f["retention.static_profile"].contains("undefined")) {
    const auto& r = f["retention.static_profile"];
    ret = "; retention " + fmt("%.1f%%", 100 * r["mean"].get<double>()) + " [" + fmt("%.1f", 100 * r["ci95"][0].get<double>()) + ", " +
          fmt("%.1f", 100 * r["ci95"][1].get<double>()) + "]%";
  }
  const std::string lead = small     ? "The frozen model does not need its dynamic coefficients: the static profile costs "
                           : depends ? "The frozen model depends on its dynamic coefficients: the static profile costs "
                                     : "Not established either way: the static profile costs ";
  const std::string rule = small ? "upper bound < " : depends ? "lower bound > " : "interval straddles ";
  v.dependence = lead + fmt("%+.4f", st["mean"].get<double>()) + " nats/token [" + fmt("%+.4f", lo) + ", " + fmt("%+.4f", hi) +
                 "] over checkpoints (" + rule + fmt("%g", threshold) + ")" + ret + ".";
}

}  // namespace

std::vector<Verdicts> compute_verdicts(const ReportData& d) {
  std::vector<Verdicts> out;
  for (const auto& a : d.audits) {
    const auto& j = a.doc;
    Verdicts v;
    v.model = short_name(j);
    v.family = j["model"]["family"];
    v.sha256 = j["provenance"]["model_sha256"];
    // 1. Coefficient variation: the share of variance that is not between coordinates (layers /
    // layer-stream-source), i.e. depends on the input or the position. "Varies" above 1%.
    const auto& sh = j["variance"]["shares"];
    const double total_variance = j["variance"]["total_variance"].get<double>();
    const double dynamic = std::max(0.0, 1.0 - sh["coordinate"].get<double>());
    v.varies = total_variance > 0 && dynamic >= 0.01;
    if (total_variance == 0)
      v.variation = "Coefficients are constant: one value for every layer, input and position (total variance 0).";
    else
    v.variation = (v.varies ? "Coefficients vary with input and position: " : "Coefficients are essentially static: ") +
                  fmt("%.1f%%", 100 * dynamic) + " of their variance is input- or token-dependent (input " +
                  fmt("%.1f%%", 100 * sh["input"].get<double>()) + ", token " + fmt("%.1f%%", 100 * sh["token"].get<double>()) +
                  "; coordinate " + fmt("%.1f%%", 100 * sh["coordinate"].get<double>()) + "; total variance " +
                  fmt("%.3g", j["variance"]["total_variance"].get<double>()) + ").";
    // 2. Functional dependence: the prespecified criteria on the static profile.
    const nlohmann::json* st = find_condition(j, "static_profile");
    if (st == nullptr) {
      v.dependence = "Not assessed: the audit ran without the static_profile condition.";
    } else {
      const double dn = (*st)["delta_nll"], lo = (*st)["ci95"][0], hi = (*st)["ci95"][1];
      const bool small = j["criteria"].contains("static_penalty_small") && j["criteria"]["static_penalty_small"]["holds"].get<bool>();
      const double threshold = j["criteria"].contains("static_penalty_small") ? j["criteria"]["static_penalty_small"]["threshold"].get<double>() : 0.002;
      // Three outcomes: practically small (upper bound below the threshold), a real dependence (the
      // whole interval above it), or not established either way.
      const bool depends = lo > threshold;
      v.needs_dynamic = depends;
      std::string ret;
      if (j["retention"].contains("static_profile") && !j["retention"]["static_profile"]["estimate"].is_null()) {
        const auto& r = j["retention"]["static_profile"];
        ret = "; retention " + fmt("%.1f%%", 100 * r["estimate"].get<double>()) + " [" + fmt("%.1f", 100 * r["ci95"][0].get<double>()) +
              ", " + fmt("%.1f", 100 * r["ci95"][1].get<double>()) + "]%";
      }
      const std::string lead = small     ? "The frozen model does not need its dynamic coefficients: the static profile costs "
                               : depends ? "The frozen model depends on its dynamic coefficients: the static profile costs "
                                         : "Not established either way: the static profile costs ";
      const std::string rule = small     ? "upper bound < "
                               : depends ? "lower bound > "
                                         : "interval straddles ";
      v.dependence = lead + fmt("%+.4f", dn) + " nats/token [" + fmt("%+.4f", lo) + ", " + fmt("%+.4f", hi) + "] (" + rule +
                     fmt("%g", threshold) + ")" + ret + ".";
    }
    // Several checkpoints of this configuration: claims 1 and 2 at the checkpoint level.
    if (const ReportData::Named* g = find_aggregate(d, v.sha256)) {
      aggregate_verdicts(g->doc, v);
      v.basis = "Claims 1 and 2 at the checkpoint level: aggregate of " + std::to_string(g->doc["checkpoints"].get<int>()) +
                " independently trained checkpoints (" + g->path + "), bootstrap over checkpoints.";
      for (const auto& in : g->doc["inputs"]) v.checkpoints.push_back(in["path"].get<std::string>());
    } else {
      v.basis = "One checkpoint: window-level CIs of " + a.path + ".";
    }
    // 3. Actual execution, measured by fca exec.
    const nlohmann::json* e = find_exec(d, v.sha256);
    if (e == nullptr) {
      v.execution = "Not measured (no exec.json for this model).";
    } else {
      const auto& live = (*e)["modes"][0];
      const double ratio = live.contains("latency_ratio_to_dense") && !live["latency_ratio_to_dense"].is_null()
                               ? live["latency_ratio_to_dense"].get<double>() : std::nan("");
      v.execution = std::to_string(live["executed_blocks"].get<int>()) + "/" + std::to_string(live["total_blocks"].get<int>()) +
                    " blocks execute with the live controller; " + fmt("%.2f", 1e3 * live["latency"]["median_s"].get<double>()) +
                    " ms per batch" + (std::isnan(ratio) ? std::string("") : ", " + fmt("%.2fx", ratio) + " Dense latency");
      v.saves_compute = live["executed_blocks"].get<int>() < live["total_blocks"].get<int>();
      if (e->contains("savings")) {
        // Routed models: a saving is claimed only where counted FLOPs and measured latency are both lower.
        v.execution = "Routing executes " + fmt("%.3g", live["gflop_per_token"].get<double>() * 1e3) + " MFLOP/token in " +
                      fmt("%.2f", 1e3 * live["latency"]["median_s"].get<double>()) + " ms per batch";
        v.saves_compute = false;
        for (const auto& s : (*e)["savings"]) {
          const bool saves = s["saves"].get<bool>();
          v.execution += std::string("; against ") + s["against"].get<std::string>() + ": " +
                         (saves ? "saves " + fmt("%.0f%%", 100 * s["flop_saving"].get<double>()) + " FLOPs and " +
                                      fmt("%.0f%%", 100 * s["latency_saving"].get<double>()) + " latency"
                                : "no saving (FLOPs x" + fmt("%.2f", s["flop_ratio"].get<double>()) + ", latency x" +
                                      fmt("%.2f", s["latency_ratio"].get<double>()) + ")");
          if (saves && s["against"] == "dense_same_shape") v.saves_compute = true;
        }
      }
      if (e->contains("skip_sweep")) {
        // The largest removal whose NLL stays within 0.01 nats of the unskipped static model.
        const auto& sweep = (*e)["skip_sweep"];
        const double base = sweep[0]["nll"];
        const nlohmann::json* best = nullptr;
        for (const auto& s : sweep)
          if (s["nll"].get<double>() - base <= 0.01 && (!best || s["executed_blocks"] < (*best)["executed_blocks"])) best = &s;
        if (best && (*best)["executed_blocks"] < live["executed_blocks"]) {
          const int removed = live["executed_blocks"].get<int>() - (*best)["executed_blocks"].get<int>();
          v.execution += "; a real skip (tau " + fmt("%g", (*best)["threshold"].get<double>()) + ") removes " +
                         std::to_string(removed) + (removed == 1 ? " block" : " blocks") + " at " +
                         fmt("%+.4f", (*best)["nll"].get<double>() - base) + " nats and " +
                         fmt("%.2fx", (*best)["latency"]["median_s"].get<double>() / live["latency"]["median_s"].get<double>()) +
                         " the latency";
        }
        else
          v.execution += "; no block can be removed within 0.01 nats";
      }
      v.execution += ".";
    }
    out.push_back(v);
  }
  return out;
}

std::string figure_penalties(const ReportData& d) {
  if (d.audits.empty()) return "";
  std::vector<std::string> conditions;
  for (const auto& a : d.audits)
    for (const auto& c : a.doc["conditions"])
      if (c["name"] != "correct" && std::find(conditions.begin(), conditions.end(), c["name"].get<std::string>()) == conditions.end())
        conditions.push_back(c["name"]);
  double hi = 1e-3;
  for (const auto& a : d.audits)
    for (const auto& c : a.doc["conditions"]) hi = std::max(hi, std::abs(c["ci95"][1].get<double>()));
  const double lo = 1e-5;
  const int row = 26, top = 30, left = 150, width = 760;
  const int legend_rows = int((d.audits.size() + 1) / 2);
  const int height = top + row * int(conditions.size()) + 56 + 14 * legend_rows;
  svg::Canvas cv(width, height, "Penalties (|DeltaNLL|) per condition with 95% CIs, log axis");
  const svg::Scale sx{lo, std::pow(10.0, std::ceil(std::log10(hi))), double(left), double(width - 20), true};
  for (size_t i = 0; i < conditions.size(); ++i) {
    const double y = top + row * (double(i) + 0.5);
    cv.text(left - 8, y + 4, conditions[i], "end");
    cv.line(left, y, width - 20, y, "#eee");
    for (size_t m = 0; m < d.audits.size(); ++m) {
      const nlohmann::json* c = find_condition(d.audits[m].doc, conditions[i]);
      if (c == nullptr) continue;
      const double dn = (*c)["delta_nll"], a = (*c)["ci95"][0], b = (*c)["ci95"][1];
      const double yy = y + (double(m) - (double(d.audits.size()) - 1) / 2) * 5;
      // |CI| on the log axis: an interval straddling zero reaches down to the axis floor.
      const double ca = (a <= 0 && b >= 0) ? lo : std::min(std::abs(a), std::abs(b)), cb = std::max(std::abs(a), std::abs(b));
      cv.line(sx(ca), yy, sx(cb), yy, svg::palette(m), 2);
      cv.circle(sx(std::max(std::abs(dn), lo)), yy, 4, svg::palette(m), dn < 0,
                short_name(d.audits[m].doc) + " " + conditions[i] + ": " + fmt("%+.5f", dn) + " [" + fmt("%+.5f", a) + ", " +
                    fmt("%+.5f", b) + "]");
    }
  }
  cv.x_axis(sx, top + row * double(conditions.size()) + 4,
            "|DeltaNLL| (nats per token), log scale; hollow = negative; exact zeros sit at the left edge");
  for (size_t m = 0; m < d.audits.size(); ++m) {
    const double y = top + row * double(conditions.size()) + 50 + 14 * double(m / 2);
    cv.circle(left + 10 + 300 * double(m % 2), y - 4, 4, svg::palette(m));
    cv.text(left + 18 + 300 * double(m % 2), y, short_name(d.audits[m].doc), "start", 10);
  }
  return cv.str();
}

std::string figure_retention(const ReportData& d) {
  std::vector<std::pair<std::string, const nlohmann::json*>> rows;
  std::vector<size_t> colour;  // the audit's index: the same colour as in the other figures
  for (size_t m = 0; m < d.audits.size(); ++m)
    for (const char* p : {"static_profile", "layer_position_mean"})
      if (d.audits[m].doc["retention"].contains(p) && !d.audits[m].doc["retention"][p]["estimate"].is_null()) {
        rows.push_back({short_name(d.audits[m].doc) + " · " + p, &d.audits[m].doc["retention"][p]});
        colour.push_back(m);
      }
  if (rows.empty()) return "";
  const int row = 24, top = 20, left = 300, width = 760, height = top + row * int(rows.size()) + 50;
  svg::Canvas cv(width, height, "Retention of the static profiles with 95% CIs");
  double lo = 0.0, hi = 1.0;
  for (const auto& [n, r] : rows) lo = std::min(lo, (*r)["ci95"][0].get<double>()), hi = std::max(hi, (*r)["ci95"][1].get<double>());
  lo = std::max(lo, -2.0);
  hi = std::min(hi, 3.0);
  const svg::Scale sx{lo, hi, double(left), double(width - 20)};
  cv.line(sx(0.95), top - 5, sx(0.95), top + row * double(rows.size()), "#2ca02c", 1, true);
  cv.text(sx(0.95), top - 8, "95%", "middle", 9, "#2ca02c");
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = *rows[i].second;
    const double y = top + row * (double(i) + 0.5);
    cv.text(left - 8, y + 4, rows[i].first, "end", 10);
    const double a = std::max(lo, r["ci95"][0].get<double>()), b = std::min(hi, r["ci95"][1].get<double>());
    cv.line(sx(a), y, sx(b), y, svg::palette(colour[i]), 2);
    cv.circle(sx(std::max(lo, std::min(hi, r["estimate"].get<double>()))), y, 4, svg::palette(colour[i]), false,
              rows[i].first + ": " + fmt("%.1f%%", 100 * r["estimate"].get<double>()));
  }
  cv.x_axis(sx, top + row * double(rows.size()) + 4, "retention = 1 - DeltaNLL(profile) / DeltaNLL(structure_removed)", true);
  return cv.str();
}

std::string figure_variance(const ReportData& d) {
  if (d.audits.empty()) return "";
  const std::vector<std::string> parts{"coordinate", "input", "token", "coordinate_x_input", "coordinate_x_token",
                                       "input_x_token", "residual"};
  const int row = 26, top = 20, left = 300, width = 760, height = top + row * int(d.audits.size()) + 70;
  svg::Canvas cv(width, height, "Coefficient variance shares (balanced functional ANOVA)");
  const svg::Scale sx{0, 1, double(left), double(width - 20)};
  for (size_t m = 0; m < d.audits.size(); ++m) {
    const double y = top + row * double(m);
    cv.text(left - 8, y + 16, short_name(d.audits[m].doc), "end", 10);
    double acc = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      const double share = d.audits[m].doc["variance"]["shares"][parts[p]];
      cv.rect(sx(acc), y + 4, sx(acc + share) - sx(acc), row - 8, svg::palette(p),
              parts[p] + ": " + fmt("%.2f%%", 100 * share));
      acc += share;
    }
  }
  cv.x_axis(sx, top + row * double(d.audits.size()) + 2, "share of the total sum of squares", true);
  for (size_t p = 0; p < parts.size(); ++p) {
    cv.rect(20 + 105 * double(p), height - 16, 10, 10, svg::palette(p));
    cv.text(33 + 105 * double(p), height - 7, parts[p], "start", 9);
  }
  return cv.str();
}

// A figure's matrix must be a non-empty rectangular array of numbers: anything else in a result
// file is an error naming it (indexing a ragged array would read out of bounds).
void require_matrix(const nlohmann::json& m, const std::string& path, const char* what) {
  bool ok = m.is_array() && !m.empty() && m[0].is_array() && !m[0].empty();
  for (size_t r = 0; ok && r < m.size(); ++r) {
    ok = m[r].is_array() && m[r].size() == m[0].size();
    for (size_t c = 0; ok && c < m[r].size(); ++c) ok = m[r][c].is_number();
  }
  if (!ok) throw Error(path + ": " + what + " is not a non-empty rectangular array of numbers");
}

std::string figure_profiles(const ReportData& d) {
  std::string out;
  for (const auto& a : d.audits) {
    const auto& prof = a.doc["profiles"];
    if (a.doc.contains("routing")) {  // routed: expert load (layer x expert) or selection frequency (layer x position)
      const bool experts = a.doc["routing"].contains("expert_load");
      const auto& m = experts ? a.doc["routing"]["expert_load"] : a.doc["routing"]["selection_frequency"];
      require_matrix(m, a.path, experts ? "routing.expert_load" : "routing.selection_frequency");
      const int L = int(m.size()), C = int(m[0].size());
      double mx = 1e-12;
      for (const auto& row : m)
        for (const auto& x : row) mx = std::max(mx, x.get<double>());
      const int cell_w = experts ? 36 : std::max(1, 640 / C), cell_h = 18, left = 90, top = 30;
      const std::string what = experts ? "expert load, layer x expert (share of token-slot assignments)"
                                       : "selection frequency, routed block x position (share of windows)";
      svg::Canvas cv(std::max(left + cell_w * C + 130, 760), top + cell_h * L + 50, "Routing: " + short_name(a.doc));
      cv.text(left, 16, short_name(a.doc) + ": " + what, "start", 11, "#333", true);
      for (int l = 0; l < L; ++l) {
        cv.text(left - 6, top + cell_h * (l + 0.7), (experts ? "layer " : "routed ") + std::to_string(l), "end", 10);
        for (int c = 0; c < C; ++c) {
          const double x = m[size_t(l)][size_t(c)];
          cv.rect(left + cell_w * c, top + cell_h * l, cell_w, cell_h, svg::sequential(x / mx),
                  (experts ? "layer " + std::to_string(l) + ", expert " : "routed block " + std::to_string(l) + ", position ") +
                      std::to_string(c) + ": " + fmt("%.4f", x));
        }
      }
      cv.text(left, top + cell_h * L + 14, experts ? "expert 0" : "position 0", "start", 10);
      cv.text(left + cell_w * C, top + cell_h * L + 14, (experts ? "expert " : "position ") + std::to_string(C - 1), "end", 10);
      for (int k = 0; k <= 4; ++k) {
        cv.rect(left + cell_w * C + 20, top + 12.0 * k, 14, 12, svg::sequential(1.0 - k / 4.0));
        cv.text(left + cell_w * C + 38, top + 12.0 * k + 10, fmt("%.3f", mx * (1.0 - k / 4.0)), "start", 9);
      }
      out += cv.str();
    } else if (prof.contains("layer_position_mean")) {  // gated: layer x position of the calibrated gate
      const auto& m = prof["layer_position_mean"];
      require_matrix(m, a.path, "profiles.layer_position_mean");
      const int L = int(m.size()), T = int(m[0].size());
      const int cell_w = std::max(1, 640 / T), cell_h = 18, left = 70, top = 30;
      svg::Canvas cv(left + cell_w * T + 120, top + cell_h * L + 50, "Calibrated gate, layer x position: " + short_name(a.doc));
      cv.text(left, 16, short_name(a.doc) + ": mean gate over the calibration set (layer x position)", "start", 11, "#333", true);
      for (int l = 0; l < L; ++l) {
        cv.text(left - 6, top + cell_h * (l + 0.7), "layer " + std::to_string(l), "end", 10);
        for (int t = 0; t < T; ++t) {
          const double g = m[size_t(l)][size_t(t)];
          cv.rect(left + cell_w * t, top + cell_h * l, cell_w, cell_h, svg::sequential(g),
                  "layer " + std::to_string(l) + ", position " + std::to_string(t) + ": g = " + fmt("%.4f", g));
        }
      }
      cv.text(left, top + cell_h * L + 14, "position 0", "start", 10);
      cv.text(left + cell_w * T, top + cell_h * L + 14, "position " + std::to_string(T - 1), "end", 10);
      for (int k = 0; k <= 4; ++k) {
        cv.rect(left + cell_w * T + 20, top + 12.0 * k, 14, 12, svg::sequential(1.0 - k / 4.0));
        cv.text(left + cell_w * T + 38, top + 12.0 * k + 10, fmt("%.2f", 1.0 - k / 4.0), "start", 9);
      }
      out += cv.str();
    } else {  // MUDD: layer x source per stream, signed
      const auto& S = prof["static_profile"];
      // [layer][stream][source] of numbers or nulls, rectangular, at most 4 streams (Q, K, V, R).
      const bool shaped = S.is_array() && !S.empty() && S[0].is_array() && !S[0].empty() && S[0].size() <= 4 &&
                          S[0][0].is_array() && !S[0][0].empty();
      bool rectangular = shaped;
      for (size_t l = 0; rectangular && l < S.size(); ++l) {
        rectangular = S[l].is_array() && S[l].size() == S[0].size();
        for (size_t st = 0; rectangular && st < S[l].size(); ++st) {
          rectangular = S[l][st].is_array() && S[l][st].size() == S[0][0].size();
          for (size_t k = 0; rectangular && k < S[l][st].size(); ++k) rectangular = S[l][st][k].is_number() || S[l][st][k].is_null();
        }
      }
      if (!rectangular)
        throw Error(a.path + ": profiles.static_profile is not a rectangular [layer][stream <= 4][source] array of numbers");
      const int L = int(S.size()), streams = int(S[0].size()), K = int(S[0][0].size());
      double mx = 1e-9;
      for (const auto& l : S)
        for (const auto& s : l)
          for (const auto& v : s)
            if (!v.is_null()) mx = std::max(mx, std::abs(v.get<double>()));
      const int cell = 18, panel = cell * K + 40, left = 60, top = 34;
      svg::Canvas cv(std::max(left + panel * streams + 80, 760), top + cell * L + 40, "Static mixing profile: " + short_name(a.doc));
      cv.text(left, 16, short_name(a.doc) + ": StaticMixMean, layer x source per stream (signed; colour scale +-" +
                            fmt("%.2f", mx) + ")", "start", 11, "#333", true);
      const char* names[4] = {"Q", "K", "V", "R"};
      for (int s = 0; s < streams; ++s) {
        const double x0 = left + panel * s;
        cv.text(x0 + cell * K / 2.0, top - 4, std::string("stream ") + names[s], "middle", 10);
        for (int l = 0; l < L; ++l)
          for (int k = 0; k < K; ++k) {
            const auto& v = S[size_t(l)][size_t(s)][size_t(k)];
            if (v.is_null()) continue;
            cv.rect(x0 + cell * k, top + cell * l, cell - 1, cell - 1, svg::diverging(v.get<double>() / mx),
                    "layer " + std::to_string(l) + ", stream " + names[s] + ", source " + std::to_string(k) + ": " +
                        fmt("%+.4f", v.get<double>()));
          }
      }
      for (int l = 0; l < L; ++l) cv.text(left - 6, top + cell * (l + 0.7), "layer " + std::to_string(l), "end", 9);
      cv.text(left, top + cell * L + 14, "source 0 (embedding) ... L (newest)", "start", 9);
      out += cv.str();
    }
  }
  return out;
}

std::string figure_latency(const ReportData& d) {
  struct Point {
    double blocks, ms;
    std::string label;
    size_t series;
  };
  std::vector<Point> pts;
  std::vector<std::vector<std::pair<double, double>>> sweeps;
  std::vector<std::string> series_names;
  for (const auto& e : d.execs)
    for (const auto& m : e.doc["models"]) {
      const size_t s = series_names.size();
      const auto& c = m["config"];
      series_names.push_back(m["gate"].get<std::string>() + " L" + std::to_string(c.value("n_layer", 0)));
      for (const auto& r : m["modes"])
        pts.push_back({r["executed_blocks"].get<double>(), 1e3 * r["latency"]["median_s"].get<double>(),
                       series_names.back() + " " + r["mode"].get<std::string>(), s});
      std::vector<std::pair<double, double>> sw;
      if (m.contains("skip_sweep"))
        for (const auto& r : m["skip_sweep"]) sw.push_back({r["executed_blocks"].get<double>(), 1e3 * r["latency"]["median_s"].get<double>()});
      sweeps.push_back(sw);
    }
  if (pts.empty()) return "";
  double max_blocks = 1, max_ms = 1e-3;
  for (const auto& p : pts) max_blocks = std::max(max_blocks, p.blocks), max_ms = std::max(max_ms, p.ms);
  for (const auto& sw : sweeps)
    for (const auto& [b, ms] : sw) max_ms = std::max(max_ms, ms);
  const int left = 70, top = 20, width = 720, height = 340;
  svg::Canvas cv(width, height, "Latency against executed blocks");
  const svg::Scale sx{0, max_blocks + 0.5, double(left), double(width - 200)}, sy{0, max_ms * 1.1, double(height - 50), double(top)};
  for (size_t s = 0; s < sweeps.size(); ++s) {
    std::vector<std::pair<double, double>> line;
    for (const auto& [b, ms] : sweeps[s]) line.push_back({sx(b), sy(ms)});
    if (line.size() > 1) cv.polyline(line, svg::palette(s), 1.2);
    for (const auto& [x, y] : line) cv.circle(x, y, 3, svg::palette(s), true, series_names[s] + " skip sweep");
  }
  for (const auto& p : pts) cv.circle(sx(p.blocks), sy(p.ms), 4, svg::palette(p.series), false, p.label + ": " + fmt("%.2f ms", p.ms));
  cv.x_axis(sx, height - 50, "executed blocks per forward pass");
  cv.y_axis(sy, left, "median latency per batch (ms)");
  for (size_t s = 0; s < series_names.size(); ++s) {
    cv.circle(width - 185, top + 10 + 16.0 * s, 4, svg::palette(s));
    cv.text(width - 175, top + 14 + 16.0 * s, series_names[s], "start", 10);
  }
  cv.text(width - 185, top + 20 + 16.0 * series_names.size(), "filled: live, replay, forced", "start", 9, "#666");
  cv.text(width - 185, top + 32 + 16.0 * series_names.size(), "hollow + line: skip sweep", "start", 9, "#666");
  return cv.str();
}

std::string figure_training(const ReportData& d) {
  if (d.train_logs.empty()) return "";
  double max_step = 1, lo = 1e9, hi = -1e9;
  for (const auto& t : d.train_logs)
    for (const auto* series : {&t.loss, &t.valid})
      for (const auto& [s, v] : *series) max_step = std::max(max_step, s), lo = std::min(lo, v), hi = std::max(hi, v);
  const int left = 70, top = 20, width = 720, height = 320;
  svg::Canvas cv(width, height, "Training curves");
  const svg::Scale sx{0, max_step, double(left), double(width - 200)}, sy{std::floor(lo * 2) / 2, std::ceil(hi * 2) / 2, double(height - 50), double(top)};
  for (size_t i = 0; i < d.train_logs.size(); ++i) {
    std::vector<std::pair<double, double>> loss, valid;
    for (const auto& [s, v] : d.train_logs[i].loss) loss.push_back({sx(s), sy(v)});
    for (const auto& [s, v] : d.train_logs[i].valid) valid.push_back({sx(s), sy(v)});
    if (loss.size() > 1) cv.polyline(loss, svg::palette(i), 1);
    for (const auto& [x, y] : valid) cv.circle(x, y, 3, svg::palette(i), true, d.train_logs[i].label + " validation NLL");
    cv.circle(width - 185, top + 10 + 16.0 * i, 4, svg::palette(i));
    cv.text(width - 175, top + 14 + 16.0 * i, d.train_logs[i].label, "start", 10);
  }
  cv.x_axis(sx, height - 50, "optimizer step");
  cv.y_axis(sy, left, "loss / validation NLL (nats)");
  return cv.str();
}

}  // namespace fca
