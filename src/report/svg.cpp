#include "report/svg.h"

#include <cmath>
#include <cstdio>

namespace fca::svg {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

const std::string& palette(size_t i) {
  static const std::vector<std::string> colors{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                               "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
  return colors[i % colors.size()];
}

namespace {
std::string rgb(double r, double g, double b) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", int(std::lround(255 * r)), int(std::lround(255 * g)), int(std::lround(255 * b)));
  return buf;
}
double clamp01(double v) { return v < 0 ? 0 : (v > 1 ? 1 : v); }
}  // namespace

std::string diverging(double v) {
  v = std::max(-1.0, std::min(1.0, v));
  if (v >= 0) return rgb(1, 1 - 0.75 * v, 1 - 0.8 * v);        // white -> red
  return rgb(1 + 0.8 * v, 1 + 0.6 * v, 1);                     // white -> blue
}

std::string sequential(double v) {
  v = clamp01(v);
  return rgb(1 - 0.85 * v, 1 - 0.6 * v, 1 - 0.25 * v);  // white -> blue
}

double Scale::operator()(double v) const {
  double a = d0, b = d1, x = v;
  if (log) {
    a = std::log10(d0);
    b = std::log10(d1);
    x = std::log10(std::max(v, d0));
  }
  const double t = b == a ? 0.5 : (x - a) / (b - a);
  return r0 + t * (r1 - r0);
}

std::vector<double> ticks(const Scale& s, int count) {
  std::vector<double> out;
  if (s.log) {
    for (int e = int(std::floor(std::log10(s.d0))); e <= int(std::ceil(std::log10(s.d1))); ++e) {
      const double v = std::pow(10.0, e);
      if (v >= s.d0 * 0.999 && v <= s.d1 * 1.001) out.push_back(v);
    }
    return out;
  }
  const double span = s.d1 - s.d0;
  if (span <= 0) return {s.d0};
  const double raw = span / count, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  for (double v = std::ceil(s.d0 / step) * step; v <= s.d1 + 1e-12 * span; v += step) out.push_back(std::abs(v) < 1e-12 * span ? 0 : v);
  return out;
}

Canvas::Canvas(int width, int height, const std::string& title) : width_(width), height_(height) {
  body_ += "<title>" + escape(title) + "</title>";
}

void Canvas::line(double x1, double y1, double x2, double y2, const std::string& color, double width, bool dashed) {
  body_ += "<line x1=\"" + num(x1, 6) + "\" y1=\"" + num(y1, 6) + "\" x2=\"" + num(x2, 6) + "\" y2=\"" + num(y2, 6) +
           "\" stroke=\"" + color + "\" stroke-width=\"" + num(width) + "\"" + (dashed ? " stroke-dasharray=\"4 3\"" : "") +
           "/>";
}

void Canvas::rect(double x, double y, double w, double h, const std::string& fill, const std::string& tooltip) {
  body_ += "<rect x=\"" + num(x, 6) + "\" y=\"" + num(y, 6) + "\" width=\"" + num(std::max(0.0, w), 6) + "\" height=\"" +
           num(std::max(0.0, h), 6) + "\" fill=\"" + fill + "\">";
  if (!tooltip.empty()) body_ += "<title>" + escape(tooltip) + "</title>";
  body_ += "</rect>";
}

void Canvas::circle(double x, double y, double r, const std::string& fill, bool hollow, const std::string& tooltip) {
  body_ += "<circle cx=\"" + num(x, 6) + "\" cy=\"" + num(y, 6) + "\" r=\"" + num(r) + "\" " +
           (hollow ? "fill=\"white\" stroke=\"" + fill + "\" stroke-width=\"1.5\"" : "fill=\"" + fill + "\"") + ">";
  if (!tooltip.empty()) body_ += "<title>" + escape(tooltip) + "</title>";
  body_ += "</circle>";
}

void Canvas::text(double x, double y, const std::string& s, const std::string& anchor, int size, const std::string& color,
                  bool bold) {
  body_ += "<text x=\"" + num(x, 6) + "\" y=\"" + num(y, 6) + "\" font-size=\"" + std::to_string(size) + "\" text-anchor=\"" +
           anchor + "\" fill=\"" + color + "\"" + (bold ? " font-weight=\"bold\"" : "") + ">" + escape(s) + "</text>";
}

void Canvas::polyline(const std::vector<std::pair<double, double>>& points, const std::string& color, double width) {
  std::string pts;
  for (const auto& [x, y] : points) pts += num(x, 6) + "," + num(y, 6) + " ";
  body_ += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"" + num(width) + "\"/>";
}

void Canvas::x_axis(const Scale& sx, double y, const std::string& label, bool percent) {
  line(std::min(sx.r0, sx.r1), y, std::max(sx.r0, sx.r1), y, "#555");
  for (double t : ticks(sx)) {
    const double x = sx(t);
    line(x, y, x, y + 4, "#555");
    text(x, y + 15, percent ? num(100 * t) + "%" : num(t), "middle", 10);
  }
  text((sx.r0 + sx.r1) / 2, y + 30, label, "middle", 11);
}

void Canvas::y_axis(const Scale& sy, double x, const std::string& label, bool percent) {
  line(x, std::min(sy.r0, sy.r1), x, std::max(sy.r0, sy.r1), "#555");
  for (double t : ticks(sy)) {
    const double y = sy(t);
    line(x - 4, y, x, y, "#555");
    text(x - 6, y + 3, percent ? num(100 * t) + "%" : num(t), "end", 10);
  }
  body_ += "<text x=\"" + num(x - 42) + "\" y=\"" + num((sy.r0 + sy.r1) / 2) + "\" font-size=\"11\" text-anchor=\"middle\" "
           "transform=\"rotate(-90 " + num(x - 42) + " " + num((sy.r0 + sy.r1) / 2) + ")\">" + escape(label) + "</text>";
}

std::string Canvas::str() const {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width_) + "\" height=\"" +
         std::to_string(height_) + "\" viewBox=\"0 0 " + std::to_string(width_) + " " + std::to_string(height_) +
         "\" font-family=\"sans-serif\">" + body_ + "</svg>";
}

}  // namespace fca::svg
