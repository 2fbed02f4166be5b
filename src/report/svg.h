// Minimal SVG building for the report's figures: escaped text, scales (linear and log10), axes
// with ticks, and a fixed colour palette. Output is XHTML-compatible (every element closed).
#pragma once
#include <string>
#include <vector>

namespace fca::svg {

std::string escape(const std::string& text);  // &, <, >, " and '
std::string num(double v, int precision = 3);  // compact, locale-independent
const std::string& palette(size_t i);          // categorical colours, cycling
// A diverging (blue-white-red) colour for v in [-1, 1], sequential (white-blue) for v in [0, 1].
std::string diverging(double v);
std::string sequential(double v);

struct Scale {
  double d0, d1, r0, r1;  // domain [d0, d1] -> range [r0, r1]
  bool log = false;       // log10 domain (d0, d1 > 0)
  double operator()(double v) const;
};

// Ticks for a scale: nice linear steps, or powers of ten for log scales.
std::vector<double> ticks(const Scale& s, int count = 5);

class Canvas {
 public:
  Canvas(int width, int height, const std::string& title);
  void line(double x1, double y1, double x2, double y2, const std::string& color, double width = 1, bool dashed = false);
  void rect(double x, double y, double w, double h, const std::string& fill, const std::string& tooltip = "");
  void circle(double x, double y, double r, const std::string& fill, bool hollow = false, const std::string& tooltip = "");
  void text(double x, double y, const std::string& s, const std::string& anchor = "start", int size = 11,
            const std::string& color = "#333", bool bold = false);
  void polyline(const std::vector<std::pair<double, double>>& points, const std::string& color, double width = 1.5);
  // Axes: a horizontal axis at y for scale sx, a vertical one at x for scale sy, with tick labels.
  void x_axis(const Scale& sx, double y, const std::string& label, bool percent = false);
  void y_axis(const Scale& sy, double x, const std::string& label, bool percent = false);
  std::string str() const;

 private:
  int width_, height_;
  std::string body_;
};

}  // namespace fca::svg
