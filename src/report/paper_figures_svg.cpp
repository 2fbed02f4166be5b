// The paper page's figures drawn as the paper draws them: interval plots of fca's figure per corpus
// (point and 95% interval) with the paper's value marked beside it (hollow diamond), on the paper's
// axes: Figure 2 (FeatureGate's ΔNLL, log axis), Figure 4 (retention, per cent), Figure 5 (both
// families' penalties, log axis) and the thresholding sweep (executed blocks against Byte-PPL).
#include <algorithm>
#include <cmath>

#include "report/paper_figures_svg.h"
#include "report/svg.h"

namespace fca {
namespace {

const nlohmann::json* find_row(const nlohmann::json& p, const std::string& id) {
  for (const auto& s : p["sections"])
    for (const auto& r : s["rows"])
      if (r["id"] == id) return &r;
  return nullptr;
}

// One mark of a plot row: a value with an optional interval; hollow marks are the paper's.
struct Mark {
  std::string series, color;
  double value, lo, hi;
  bool paper;
};
struct PlotRow {
  std::string label;
  std::vector<Mark> marks;
};

// The paper's first printed number of a cell, if any.
bool paper_number(const nlohmann::json& cell, double& out, std::string& setting) {
  for (const auto& r : cell["paper"]["readings"])
    if (r.contains("number")) {
      out = r["number"].get<double>();
      setting = r.value("setting", std::string());
      return true;
    }
  return false;
}

// Marks of one row id: fca's per corpus, then the paper's per corpus where it printed a number.
void add_marks(const nlohmann::json& p, const std::string& id, const std::string& who, size_t colour, PlotRow& row) {
  const nlohmann::json* r = find_row(p, id);
  if (r == nullptr) return;
  for (size_t i = 0; i < (*r)["cells"].size(); ++i) {
    const auto& c = (*r)["cells"][i];
    const std::string corpus = c["corpus"].get<std::string>();
    if (c["value"].is_number()) {
      const double v = c["value"].get<double>();
      double lo = v, hi = v;
      if (c["data"].contains("ci95")) lo = c["data"]["ci95"][0].get<double>(), hi = c["data"]["ci95"][1].get<double>();
      row.marks.push_back({who + " fca, " + corpus, svg::palette(colour + 2 * i), v, lo, hi, false});
    }
    double pv;
    std::string setting;
    if (paper_number(c, pv, setting)) row.marks.push_back({who + " paper, " + setting, svg::palette(colour + 2 * i), pv, pv, pv, true});
  }
}

std::string interval_plot(const std::string& title, const std::vector<PlotRow>& rows, bool log, const std::string& axis) {
  double lo = INFINITY, hi = -INFINITY;
  size_t marks = 0;
  // On a log axis a mark needs a positive value; an interval reaching 0 or below is drawn to the
  // axis's left end.
  for (const auto& r : rows)
    for (const auto& m : r.marks) {
      if (log && m.value <= 0) continue;
      lo = std::min(lo, log && m.lo <= 0 ? m.value : m.lo), hi = std::max(hi, m.hi), ++marks;
    }
  if (marks == 0) return "<p class=\"sub\">" + svg::escape(title) + ": nothing to draw (no defined figure).</p>";
  if (log) lo = std::pow(10, std::floor(std::log10(lo))), hi = std::pow(10, std::ceil(std::log10(hi)));
  else {
    const double pad = std::max(1e-9, (hi - lo) * 0.08);
    lo -= pad, hi += pad;
  }
  const int left = 220, width = 820, row_h = 18;
  int height = 60;
  for (const auto& r : rows) height += row_h * int(std::max<size_t>(1, r.marks.size())) + 8;
  svg::Canvas cv(width, height, title);
  cv.text(8, 16, title, "start", 12, "#333", true);
  const svg::Scale sx{lo, hi, double(left), double(width - 20), log};
  double y = 30;
  for (const auto& r : rows) {
    cv.text(left - 8, y + 12, r.label, "end", 11);
    for (const auto& m : r.marks) {
      y += row_h;
      if (log && m.value <= 0) {
        cv.text(left + 4, y, m.series + ": " + svg::num(m.value) + " (not positive: off the log axis)", "start", 9, "#777");
        continue;
      }
      if (m.hi > m.lo) cv.line(sx(m.lo), y, sx(m.hi), y, m.color, 2);
      const std::string tip = m.series + ": " + svg::num(m.value, 4) + (m.hi > m.lo ? " [" + svg::num(m.lo, 4) + ", " + svg::num(m.hi, 4) + "]" : "");
      if (m.paper) {
        cv.rect(sx(m.value) - 4, y - 4, 8, 8, "none", tip);
        cv.line(sx(m.value) - 5, y, sx(m.value), y - 5, m.color, 1.5), cv.line(sx(m.value), y - 5, sx(m.value) + 5, y, m.color, 1.5);
        cv.line(sx(m.value) + 5, y, sx(m.value), y + 5, m.color, 1.5), cv.line(sx(m.value), y + 5, sx(m.value) - 5, y, m.color, 1.5);
      } else {
        cv.circle(sx(m.value), y, 4, m.color, false, tip);
      }
      cv.text(std::min(double(width - 20), sx(m.hi)) + 8 > width - 150 ? sx(m.lo) - 8 : sx(m.hi) + 8, y + 3, m.series,
              sx(m.hi) + 8 > width - 150 ? "end" : "start", 9, "#555");
    }
    y += 8;
  }
  cv.x_axis(sx, y + 10, axis);
  return cv.str();
}

std::string thresholding_plot(const nlohmann::json& p) {
  const nlohmann::json* r = find_row(p, "thresholding.featuregate");
  if (r == nullptr) return "";
  double x1 = 0, ylo = INFINITY, yhi = -INFINITY;
  for (const auto& c : (*r)["cells"])
    for (const auto& s : c["data"].value("sweep", nlohmann::json::array())) {
      x1 = std::max(x1, s["total_blocks"].get<double>());
      ylo = std::min(ylo, s["byte_ppl"].get<double>()), yhi = std::max(yhi, s["byte_ppl"].get<double>());
    }
  if (x1 == 0) return "<p class=\"sub\">Thresholding: no skip sweep was measured.</p>";
  const int width = 720, height = 300, left = 70;
  svg::Canvas cv(width, height, "thresholding");
  cv.text(8, 16, "Post-training thresholding of FeatureGate: executed blocks against Byte-PPL", "start", 12, "#333", true);
  // Byte-PPL on a log axis: removing every block multiplies it by about 100, which a linear axis
  // would show at the cost of the few-percent changes of the first removals.
  const svg::Scale sx{0, x1, double(left), double(width - 20)}, sy{ylo * 0.9, yhi * 1.1, double(height - 50), 30.0, true};
  for (size_t i = 0; i < (*r)["cells"].size(); ++i) {
    const auto& c = (*r)["cells"][i];
    std::vector<std::pair<double, double>> pts;
    for (const auto& s : c["data"].value("sweep", nlohmann::json::array())) {
      const double x = s["executed_blocks"].get<double>(), yv = s["byte_ppl"].get<double>();
      pts.push_back({sx(x), sy(yv)});
      cv.circle(sx(x), sy(yv), 4, svg::palette(2 * i), false,
                c["corpus"].get<std::string>() + ": τ " + svg::num(s["threshold"].get<double>()) + ", " + svg::num(x) + " blocks, Byte-PPL " + svg::num(yv, 4));
    }
    std::sort(pts.begin(), pts.end());
    cv.polyline(pts, svg::palette(2 * i));
    cv.text(width - 20, 40 + 14 * double(i), c["corpus"].get<std::string>(), "end", 10, svg::palette(2 * i), true);
  }
  cv.x_axis(sx, height - 50, "executed blocks");
  cv.y_axis(sy, left, "Byte-PPL (test, log axis)");
  return cv.str();
}

}  // namespace

std::string paper_figures_html(const nlohmann::json& p) {
  std::string h;
  std::vector<PlotRow> f2;
  for (const char* c : {"cross_input", "token_shuffle", "cross_shuffle", "layer_position_mean", "static_profile", "structure_removed"}) {
    PlotRow row{c, {}};
    add_marks(p, std::string("figure2.") + c, "FeatureGate", 0, row);
    f2.push_back(row);
  }
  h += "<figure>" + interval_plot("Figure 2: FeatureGate's ΔNLL per condition (filled: fca, 95% interval; hollow diamond: the paper)", f2, true,
                                  "ΔNLL, nats per byte (log axis)") + "</figure>\n";
  std::vector<PlotRow> f4;
  for (const char* c : {"static_profile", "layer_position_mean"}) {
    PlotRow row{std::string("retention of ") + c, {}};
    add_marks(p, std::string("figure4.retention.") + c, "FeatureGate", 0, row);
    add_marks(p, std::string("mudd.retention.") + c, "MUDD", 4, row);
    f4.push_back(row);
  }
  h += "<figure>" + interval_plot("Figure 4: retention of the Correct-to-GlobalMean gap", f4, false, "retention, per cent") + "</figure>\n";
  std::vector<PlotRow> f5;
  for (const char* c : {"cross_input", "token_shuffle", "cross_shuffle", "layer_position_mean", "static_profile", "structure_removed"}) {
    PlotRow row{c, {}};
    add_marks(p, std::string("figure2.") + c, "FeatureGate", 0, row);
    add_marks(p, std::string("mudd.") + c, "MUDD", 4, row);
    f5.push_back(row);
  }
  h += "<figure>" + interval_plot("Figure 5: both families' penalties on one log axis", f5, true, "ΔNLL (log axis)") + "</figure>\n";
  h += "<figure>" + thresholding_plot(p) + "</figure>\n";
  return h;
}

}  // namespace fca
