#include "core/parse.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace fca {

int64_t parse_integer(const std::string& text, const std::string& what, int64_t low, int64_t high) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  const std::string range = std::to_string(low) + " .. " + std::to_string(high);
  if (text.empty() || ec != std::errc() || p != end)
    throw Error(what + " is \"" + text.substr(0, 40) + "\", expected an integer in " + range);
  if (v < low || v > high) throw Error(what + " is " + text + ", expected " + range);
  return v;
}

double parse_number(const std::string& text, const std::string& what, double low, double high) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  char range[96];
  std::snprintf(range, sizeof range, "a number in [%g, %g]", low, high);
  if (text.empty() || ec != std::errc() || p != end || !std::isfinite(v) || v < low || v > high)
    throw Error(what + " is \"" + text.substr(0, 40) + "\", expected " + range);
  return v;
}

std::string number_text(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

}  // namespace fca
