// The report's verdicts and figures (inline SVG).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/undefined_statistic.h"
#include "report/report.h"
#include "report/report_kind.h"
#include "report/report_util.h"
#include "report/svg.h"

namespace fca {
namespace {

using report_util::find_condition;
using report_util::fmt;
using report_util::text_width;

// A figure's left margin: room for its longest row label at `size` px, at least `minimum`.
int label_margin(const std::vector<std::string>& labels, int size, int minimum) {
  double w = 0;
  for (const auto& l : labels) w = std::max(w, text_width(l, size));
  return std::max(minimum, int(std::ceil(w)) + 16);
}

// Each audit's colour: one per configuration (model description), so that the seeds of a variant
// share a colour and their labels tell them apart.
std::vector<size_t> configuration_colours(const ReportData& d) {
  std::vector<std::string> seen;
  std::vector<size_t> colour;
  for (const auto& a : d.audits) {
    const std::string description = a.doc["model"]["description"];
    const auto it = std::find(seen.begin(), seen.end(), description);
    colour.push_back(size_t(it - seen.begin()));
    if (it == seen.end()) seen.push_back(description);
  }
  return colour;
}

}  // namespace

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
  std::vector<std::string> labels;
  for (const auto& a : d.audits) labels.push_back(report_util::audit_label(d, a.doc));
  const std::vector<size_t> colour = configuration_colours(d);
  // Each checkpoint's point 5 px below the previous one's, inside its condition's row.
  const int row = std::max(26, 5 * int(d.audits.size()) + 10), top = 30, left = label_margin(conditions, 11, 150);
  // The legend: two columns, each as wide as the longest label.
  const int column = label_margin(labels, 10, 150) + 20, width = std::max(760, left + 2 * column);
  const int legend_rows = int((d.audits.size() + 1) / 2);
  const int height = top + row * int(conditions.size()) + 56 + 14 * legend_rows;
  svg::Canvas cv(width, height, "Penalties (|DeltaNLL|) per condition with 95% CIs, log axis");
  const svg::Scale sx{lo, std::pow(10.0, std::ceil(std::log10(hi))), double(left), double(width - 20), true};
  for (size_t i = 0; i < conditions.size(); ++i) {
    const double y = top + row * (double(i) + 0.5);
    // Alternate rows shaded, so that each condition's points read as one group.
    if (i % 2 == 1) cv.rect(8, top + row * double(i), width - 16, row, "#f4f4f4");
    cv.text(left - 8, y + 4, conditions[i], "end");
    cv.line(left, y, width - 20, y, "#e4e4e4");
    for (size_t m = 0; m < d.audits.size(); ++m) {
      const nlohmann::json* c = find_condition(d.audits[m].doc, conditions[i]);
      if (c == nullptr) continue;
      const double dn = (*c)["delta_nll"], a = (*c)["ci95"][0], b = (*c)["ci95"][1];
      const double yy = y + (double(m) - (double(d.audits.size()) - 1) / 2) * 5;
      // |CI| on the log axis: an interval straddling zero reaches down to the axis floor.
      const double ca = (a <= 0 && b >= 0) ? lo : std::min(std::abs(a), std::abs(b)), cb = std::max(std::abs(a), std::abs(b));
      cv.line(sx(ca), yy, sx(cb), yy, svg::palette(colour[m]), 2);
      cv.circle(sx(std::max(std::abs(dn), lo)), yy, 4, svg::palette(colour[m]), dn < 0,
                labels[m] + " " + conditions[i] + ": " + fmt("%+.5f", dn) + " [" + fmt("%+.5f", a) + ", " +
                    fmt("%+.5f", b) + "]");
    }
  }
  cv.x_axis(sx, top + row * double(conditions.size()) + 4,
            "|DeltaNLL| (nats per token), log scale; hollow = negative; exact zeros sit at the left edge");
  for (size_t m = 0; m < d.audits.size(); ++m) {
    const double y = top + row * double(conditions.size()) + 50 + 14 * double(m / 2);
    cv.circle(left + 10 + column * double(m % 2), y - 4, 4, svg::palette(colour[m]));
    cv.text(left + 18 + column * double(m % 2), y, labels[m], "start", 10);
  }
  return cv.str();
}

std::string figure_retention(const ReportData& d) {
  // One row per (checkpoint, profile); an undefined retention is a row that says why, not a point.
  std::vector<std::string> labels;
  std::vector<const nlohmann::json*> rows;
  std::vector<size_t> colour;  // the audit's configuration: the same colour as in the other figures
  const std::vector<size_t> configuration = configuration_colours(d);
  for (size_t m = 0; m < d.audits.size(); ++m)
    for (const char* p : {"static_profile", "layer_position_mean"})
      if (d.audits[m].doc["retention"].contains(p)) {
        labels.push_back(report_util::audit_label(d, d.audits[m].doc) + " · " + p);
        rows.push_back(&d.audits[m].doc["retention"][p]);
        colour.push_back(configuration[m]);
      }
  if (rows.empty()) return "";
  double reasons = 0;  // the widest "undefined: <reason>" row, written where the interval would be
  for (const auto* r : rows)
    if (is_undefined_statistic(*r)) reasons = std::max(reasons, text_width("undefined: " + undefined_reason(*r), 10));
  const int row = 24, top = 20, left = label_margin(labels, 10, 200);
  const int width = std::max({760, left + 460, left + int(std::ceil(reasons)) + 24});
  const int height = top + row * int(rows.size()) + 50;
  svg::Canvas cv(width, height, "Retention of the static profiles with 95% CIs");
  double lo = 0.0, hi = 1.0;
  for (const auto* r : rows)
    if (!is_undefined_statistic(*r)) lo = std::min(lo, (*r)["ci95"][0].get<double>()), hi = std::max(hi, (*r)["ci95"][1].get<double>());
  lo = std::max(lo, -2.0);
  hi = std::min(hi, 3.0);
  const svg::Scale sx{lo, hi, double(left), double(width - 20)};
  cv.line(sx(0.95), top - 5, sx(0.95), top + row * double(rows.size()), "#2ca02c", 1, true);
  cv.text(sx(0.95), top - 8, "95%", "middle", 9, "#2ca02c");
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = *rows[i];
    const double y = top + row * (double(i) + 0.5);
    cv.text(left - 8, y + 4, labels[i], "end", 10);
    if (is_undefined_statistic(r)) {
      cv.text(left + 4, y + 4, "undefined: " + undefined_reason(r), "start", 10, "#777");
      continue;
    }
    const double a = std::max(lo, r["ci95"][0].get<double>()), b = std::min(hi, r["ci95"][1].get<double>());
    cv.line(sx(a), y, sx(b), y, svg::palette(colour[i]), 2);
    cv.circle(sx(std::max(lo, std::min(hi, r["estimate"].get<double>()))), y, 4, svg::palette(colour[i]), false,
              labels[i] + ": " + fmt("%.1f%%", 100 * r["estimate"].get<double>()));
  }
  cv.x_axis(sx, top + row * double(rows.size()) + 4, "retention = 1 - DeltaNLL(profile) / DeltaNLL(structure_removed)", true);
  return cv.str();
}

std::string figure_variance(const ReportData& d) {
  if (d.audits.empty()) return "";
  const std::vector<std::string> parts{"coordinate", "input", "token", "coordinate_x_input", "coordinate_x_token",
                                       "input_x_token", "residual"};
  std::vector<std::string> labels;
  for (const auto& a : d.audits) labels.push_back(report_util::audit_label(d, a.doc));
  double reasons = 0;  // the widest "undefined: <reason>" row of a constant tensor
  for (const auto& a : d.audits)
    if (a.doc["variance"]["shares"]["coordinate"].is_null())
      reasons = std::max(reasons, text_width("undefined: " + undefined_reason(a.doc["variance"]), 10));
  const int row = 26, top = 20, left = label_margin(labels, 10, 200);
  const int width = std::max({760, left + 460, left + int(std::ceil(reasons)) + 24});
  const int height = top + row * int(d.audits.size()) + 70;
  svg::Canvas cv(width, height, "Coefficient variance shares (balanced functional ANOVA)");
  const svg::Scale sx{0, 1, double(left), double(width - 20)};
  for (size_t m = 0; m < d.audits.size(); ++m) {
    const double y = top + row * double(m);
    const auto& variance = d.audits[m].doc["variance"];
    cv.text(left - 8, y + 16, labels[m], "end", 10);
    if (variance["shares"]["coordinate"].is_null()) {  // a constant tensor: no shares to draw
      cv.text(left + 4, y + 16, "undefined: " + undefined_reason(variance), "start", 10, "#777");
      continue;
    }
    double acc = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      const double share = variance["shares"][parts[p]];
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
void require_matrix(const nlohmann::json& m, const std::string& path, const std::string& what) {
  bool ok = m.is_array() && !m.empty() && m[0].is_array() && !m[0].empty();
  for (size_t r = 0; ok && r < m.size(); ++r) {
    ok = m[r].is_array() && m[r].size() == m[0].size();
    for (size_t c = 0; ok && c < m[r].size(); ++c) ok = m[r][c].is_number();
  }
  if (!ok) throw Error(path + ": " + what + " is not a non-empty rectangular array of numbers");
}

// Depth records (early exit): the share of evaluation tokens at each depth, and the mean depth by
// position, from the audit's live records.
std::string depth_figure(const ReportData& d, const ReportData::Named& a) {
  const auto& r = a.doc["routing"];
  const auto& h = r["exit_histogram"];
  const auto& by_position = r["mean_depth_by_position"];
  if (!h.is_array() || h.empty() || !by_position.is_array() || by_position.empty())
    throw Error(a.path + ": routing.exit_histogram and routing.mean_depth_by_position must be non-empty arrays");
  const int L = int(h.size()), T = int(by_position.size());
  const int left = 60, top = 48, bar_w = 40, plot_h = 120, gap = 80;
  const int pos_left = left + L * bar_w + gap, pos_w = std::max(200, std::min(640, 4 * T));
  svg::Canvas cv(std::max(pos_left + pos_w + 40, 760), top + plot_h + 50, "Depths: " + report_util::audit_heading(d, a.doc));
  std::string agreement;
  if (r.contains("exit_agreement") && r["exit_agreement"]["estimate"].is_number())
    agreement = "; exit agreement " + fmt("%.1f%%", 100 * r["exit_agreement"]["estimate"].get<double>());
  cv.text(left, 16, report_util::audit_heading(d, a.doc), "start", 11, "#333", true);
  cv.text(left, 32, "share of tokens by depth (mean " + fmt("%.3f", r["mean_depth"].get<double>()) + " blocks" + agreement +
                        "), and mean depth by position", "start", 10, "#333");
  double mx = 1e-12;
  for (const auto& x : h) mx = std::max(mx, x.get<double>());
  for (int k = 0; k < L; ++k) {
    const double x = h[size_t(k)].get<double>(), bh = plot_h * x / mx;
    cv.rect(left + bar_w * k + 4, top + plot_h - bh, bar_w - 8, bh, "#4477aa", "depth " + std::to_string(k + 1) + ": " + fmt("%.4f", x));
    cv.text(left + bar_w * k + bar_w / 2.0, top + plot_h + 14, std::to_string(k + 1), "middle", 10);
    cv.text(left + bar_w * k + bar_w / 2.0, top + plot_h - bh - 3, fmt("%.2f", x), "middle", 9);
  }
  cv.text(left + bar_w * L / 2.0, top + plot_h + 30, "depth (blocks run)", "middle", 10);
  // Mean depth by position: one bar per position, scaled from 0 to L.
  const double cell = double(pos_w) / T;
  for (int t = 0; t < T; ++t) {
    const double v = by_position[size_t(t)].get<double>(), bh = plot_h * v / L;
    cv.rect(pos_left + cell * t, top + plot_h - bh, std::max(1.0, cell - 0.5), bh, "#66ccee",
            "position " + std::to_string(t) + ": mean depth " + fmt("%.3f", v));
  }
  cv.text(pos_left, top + plot_h + 14, "position 0", "start", 10);
  cv.text(pos_left + pos_w, top + plot_h + 14, "position " + std::to_string(T - 1), "end", 10);
  cv.text(pos_left - 4, top + 8, std::to_string(L), "end", 9);
  cv.text(pos_left - 4, top + plot_h, "0", "end", 9);
  cv.text(pos_left + pos_w / 2.0, top + plot_h + 30, "mean depth by position", "middle", 10);
  return cv.str();
}

namespace {

// Routed records' load table from audit.json's routing.<key>: rows (`row_word` l) x columns
// (`column_word` c), each cell `cell_w` wide (0: the table spread over 640 px).
std::string load_profile(const ReportData& d, const ReportData::Named& a, const std::string& key, const std::string& what,
                         const std::string& row_word, const std::string& column_word, int cell_w) {
  const auto& m = a.doc["routing"][key];
  require_matrix(m, a.path, "routing." + key);
  const int L = int(m.size()), C = int(m[0].size());
  double mx = 1e-12;
  for (const auto& row : m)
    for (const auto& x : row) mx = std::max(mx, x.get<double>());
  if (cell_w <= 0) cell_w = std::max(1, 640 / C);
  const int cell_h = 18, left = 90, top = 30;
  svg::Canvas cv(std::max(left + cell_w * C + 130, 760), top + cell_h * L + 50, "Routing: " + report_util::audit_heading(d, a.doc));
  cv.text(left, 16, report_util::audit_heading(d, a.doc) + ": " + what, "start", 11, "#333", true);
  for (int l = 0; l < L; ++l) {
    cv.text(left - 6, top + cell_h * (l + 0.7), row_word + " " + std::to_string(l), "end", 10);
    for (int c = 0; c < C; ++c) {
      const double x = m[size_t(l)][size_t(c)];
      cv.rect(left + cell_w * c, top + cell_h * l, cell_w, cell_h, svg::sequential(x / mx),
              row_word + " " + std::to_string(l) + ", " + column_word + " " + std::to_string(c) + ": " + fmt("%.4f", x));
    }
  }
  cv.text(left, top + cell_h * L + 14, column_word + " 0", "start", 10);
  cv.text(left + cell_w * C, top + cell_h * L + 14, column_word + " " + std::to_string(C - 1), "end", 10);
  for (int k = 0; k <= 4; ++k) {
    cv.rect(left + cell_w * C + 20, top + 12.0 * k, 14, 12, svg::sequential(1.0 - k / 4.0));
    cv.text(left + cell_w * C + 38, top + 12.0 * k + 10, fmt("%.3f", mx * (1.0 - k / 4.0)), "start", 9);
  }
  return cv.str();
}

// Gates: the calibrated gate, layer x position.
std::string gate_profile(const ReportData& d, const ReportData::Named& a) {
  const auto& prof = a.doc["profiles"];
  const auto& m = prof["layer_position_mean"];
  require_matrix(m, a.path, "profiles.layer_position_mean");
  const int L = int(m.size()), T = int(m[0].size());
  const int cell_w = std::max(1, 640 / T), cell_h = 18, left = 70, top = 30;
  svg::Canvas cv(left + cell_w * T + 120, top + cell_h * L + 50, "Calibrated gate, layer x position: " + report_util::audit_heading(d, a.doc));
  cv.text(left, 16, report_util::audit_heading(d, a.doc) + ": mean gate over the calibration set (layer x position)", "start", 11, "#333", true);
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
  return cv.str();
}

// Mixing squares (MUDD, hyper-connections): layer x source per stream, signed.
std::string mixing_profile(const ReportData& d, const ReportData::Named& a) {
  const auto& prof = a.doc["profiles"];
  const auto& S = prof["static_profile"];
  // [layer][stream][source] of numbers or nulls, rectangular, at most 64 streams.
  const bool shaped = S.is_array() && !S.empty() && S[0].is_array() && !S[0].empty() && S[0].size() <= 64 &&
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
    throw Error(a.path + ": profiles.static_profile is not a rectangular [layer][stream <= 64][source] array of numbers");
  const int L = int(S.size()), streams = int(S[0].size()), K = int(S[0][0].size());
  // The family's names for the indices (audit.json model.stream_labels / source_labels), else numbers.
  auto labels = [&](const char* key, int count) {
    std::vector<std::string> out;
    const auto& model = a.doc["model"];
    if (model.contains(key) && model[key].is_array() && int(model[key].size()) >= count)
      for (int i = 0; i < count; ++i) out.push_back(model[key][size_t(i)].is_string() ? model[key][size_t(i)].get<std::string>() : std::to_string(i));
    else
      for (int i = 0; i < count; ++i) out.push_back(std::to_string(i));
    return out;
  };
  const std::vector<std::string> names = labels("stream_labels", streams), sources = labels("source_labels", K);
  double mx = 1e-9;
  for (const auto& l : S)
    for (const auto& s : l)
      for (const auto& v : s)
        if (!v.is_null()) mx = std::max(mx, std::abs(v.get<double>()));
  const int cell = 18, panel = cell * K + 40, left = 60, top = 34;
  svg::Canvas cv(std::max(left + panel * streams + 80, 760), top + cell * L + 40, "Static mixing profile: " + report_util::audit_heading(d, a.doc));
  cv.text(left, 16, report_util::audit_heading(d, a.doc) + ": " + a.doc["model"].value("static_profile", std::string("static profile")) +
                        ", layer x source per stream (signed; colour scale +-" + fmt("%.2f", mx) + ")", "start", 11, "#333", true);
  for (int s = 0; s < streams; ++s) {
    const double x0 = left + panel * s;
    cv.text(x0 + cell * K / 2.0, top - 4, names[size_t(s)], "middle", 10);
    for (int l = 0; l < L; ++l)
      for (int k = 0; k < K; ++k) {
        const auto& v = S[size_t(l)][size_t(s)][size_t(k)];
        if (v.is_null()) continue;
        cv.rect(x0 + cell * k, top + cell * l, cell - 1, cell - 1, svg::diverging(v.get<double>() / mx),
                "layer " + std::to_string(l) + ", " + names[size_t(s)] + ", source " + sources[size_t(k)] + ": " +
                    fmt("%+.4f", v.get<double>()));
      }
  }
  for (int l = 0; l < L; ++l) cv.text(left - 6, top + cell * (l + 0.7), "layer " + std::to_string(l), "end", 9);
  cv.text(left, top + cell * L + 14, "sources left to right: " + sources.front() + " ... " + sources.back(), "start", 9);
  return cv.str();
}

}  // namespace

std::string expert_load_figure(const ReportData& d, const ReportData::Named& a) {
  return load_profile(d, a, "expert_load", "expert load, layer x expert (share of token-slot assignments)", "layer", "expert", 36);
}

std::string selection_frequency_figure(const ReportData& d, const ReportData::Named& a) {
  return load_profile(d, a, "selection_frequency", "selection frequency, routed block x position (share of windows)",
                      "routed block", "position", 0);
}

// Continuous records: the calibrated gate (layer x position) where the record is one scalar per
// layer and token, else the static mixing profile per stream.
std::string continuous_profile_figure(const ReportData& d, const ReportData::Named& a) {
  return a.doc["profiles"].contains("layer_position_mean") ? gate_profile(d, a) : mixing_profile(d, a);
}

std::string figure_profiles(const ReportData& d) {
  std::string out;
  for (const auto& a : d.audits)
    if (const std::string kind = a.doc.at("model").at("record_kind").get<std::string>(); const ReportKindRow* row = report_kind_row(kind)) {
      out += row->profile_figure(d, a);
    } else {  // a kind of a family this build does not have
      svg::Canvas cv(760, 40, "Profile: " + report_util::audit_heading(d, a.doc));
      cv.text(10, 24, report_util::audit_heading(d, a.doc) + ": no figure for its record kind \"" + kind +
                          "\" (no family of this build draws it)", "start", 11, "#333");
      out += cv.str();
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
      series_names.push_back(d.label(m["model_sha256"].get<std::string>(), m["label"].get<std::string>() + " L" + std::to_string(c.value("n_layer", 0))));
      for (const auto& r : m["modes"])
        if (!r["executed_blocks"].is_null())  // an adapter that names no block modules has no count to place
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
  // The legend to the right, as wide as its longest label; the plot keeps 450 px.
  const int legend = label_margin(series_names, 10, 185), left = 70, top = 20, width = 520 + legend;
  const int height = std::max(340, top + 16 * int(series_names.size()) + 60);
  svg::Canvas cv(width, height, "Latency against executed blocks");
  const svg::Scale sx{0, max_blocks + 0.5, double(left), double(width - legend - 15)}, sy{0, max_ms * 1.1, double(height - 50), double(top)};
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
    cv.circle(width - legend, top + 10 + 16.0 * s, 4, svg::palette(s));
    cv.text(width - legend + 10, top + 14 + 16.0 * s, series_names[s], "start", 10);
  }
  cv.text(width - legend, top + 20 + 16.0 * series_names.size(), "filled: live, replay, forced", "start", 9, "#666");
  cv.text(width - legend, top + 32 + 16.0 * series_names.size(), "hollow + line: skip sweep", "start", 9, "#666");
  return cv.str();
}

// Models with a static truncation curve (exec modes carrying "fixed_depth": early exit): NLL against
// GFLOP per token and against median latency, the fixed depths of the same weights as a line and
// the live pass and threshold sweep (modes carrying "threshold") as points.
std::string figure_depth_tradeoff(const ReportData& d) {
  std::string out;
  for (const auto& e : d.execs)
    for (const auto& m : e.doc["models"]) {
      std::vector<const nlohmann::json*> curve, sweep;
      for (const auto& r : m["modes"]) {
        if (r.contains("fixed_depth")) curve.push_back(&r);
        else if (r.contains("threshold") && r["mode"] != "replay" && r["mode"] != "cross_input") sweep.push_back(&r);
      }
      if (curve.size() < 2) continue;
      const std::string name = d.label(m["model_sha256"].get<std::string>(), m["label"].get<std::string>());
      const int panel = 420, left = 70, top = 30, height = 330;
      svg::Canvas cv(2 * panel + 60, height, "Depth against quality: " + name);
      cv.text(left, 16, name + ": NLL against compute, fixed depths of the same weights (line) and thresholds (points)", "start", 11,
              "#333", true);
      for (int p = 0; p < 2; ++p) {  // 0: GFLOP/token (evaluation windows), 1: median latency per batch
        auto x_of = [&](const nlohmann::json& r) {
          return p == 0 ? r["eval_gflop_per_token"].get<double>() * 1e3 : 1e3 * r["latency"]["median_s"].get<double>();
        };
        double x0 = 1e300, x1 = 0, y0 = 1e300, y1 = -1e300;
        for (const auto* list : {&curve, &sweep})
          for (const auto* r : *list) {
            x0 = std::min(x0, x_of(*r)), x1 = std::max(x1, x_of(*r));
            y0 = std::min(y0, (*r)["nll"].get<double>()), y1 = std::max(y1, (*r)["nll"].get<double>());
          }
        const double pad_y = std::max(1e-3, 0.08 * (y1 - y0)), pad_x = std::max(1e-9, 0.05 * (x1 - x0));
        const double ox = p * (panel + 30.0);
        const svg::Scale sx{x0 - pad_x, x1 + pad_x, ox + left, ox + panel}, sy{y0 - pad_y, y1 + pad_y, double(height - 50), double(top)};
        std::vector<const nlohmann::json*> sorted = curve;
        std::sort(sorted.begin(), sorted.end(), [&](const auto* a, const auto* b) { return x_of(*a) < x_of(*b); });
        std::vector<std::pair<double, double>> line;
        for (const auto* r : sorted) line.push_back({sx(x_of(*r)), sy((*r)["nll"].get<double>())});
        cv.polyline(line, svg::palette(0), 1.4);
        for (const auto* r : sorted)
          cv.circle(sx(x_of(*r)), sy((*r)["nll"].get<double>()), 3, svg::palette(0), true,
                    (*r)["mode"].get<std::string>() + ": NLL " + fmt("%.4f", (*r)["nll"].get<double>()));
        for (const auto* r : sweep)
          cv.circle(sx(x_of(*r)), sy((*r)["nll"].get<double>()), 4, svg::palette(1), false,
                    (*r)["mode"].get<std::string>() + " (threshold " + fmt("%g", (*r)["threshold"].get<double>()) + "): NLL " +
                        fmt("%.4f", (*r)["nll"].get<double>()) + ", mean depth " + fmt("%.2f", (*r)["mean_depth"].get<double>()));
        cv.x_axis(sx, height - 50, p == 0 ? "MFLOP per token (evaluation windows)" : "median latency per batch (ms)");
        cv.y_axis(sy, ox + left, "NLL (nats/byte)");
      }
      cv.text(left, height - 8, "hollow + line: fixed depth m..L (static truncation); filled: live and the threshold sweep", "start", 9,
              "#666");
      out += cv.str();
    }
  return out;
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
