#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace fca {

std::string format_duration(double seconds) {
  if (seconds < 0) seconds = 0;
  const int64_t s = int64_t(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", long(s / 3600), long(s % 3600 / 60));
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", long(s / 60), long(s % 60));
  else std::snprintf(buf, sizeof buf, "%lds", long(s));
  return buf;
}

Progress::Progress(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total > 0 ? total : 1), tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()), last_draw_(start_ - std::chrono::hours(1)) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(int64_t done, const std::string& detail) {
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since < (tty_ ? 0.1 : 5.0)) return;
  last_draw_ = now;
  draw(done, detail, false);
}

void Progress::note(const std::string& line) {
  std::fprintf(stderr, "%s%s\n", tty_ ? "\r\033[K" : "", line.c_str());
  std::fflush(stderr);
  last_draw_ = std::chrono::steady_clock::now() - std::chrono::hours(1);  // redraw the bar next time
}

void Progress::finish(const std::string& detail) {
  if (finished_) return;
  finished_ = true;
  draw(total_, detail, true);
}

void Progress::draw(int64_t done, const std::string& detail, bool final) {
  const double elapsed = elapsed_seconds();
  const double rate = elapsed > 0 ? double(done) / elapsed : 0;
  const double eta = rate > 0 ? double(total_ - done) / rate : 0;
  const double frac = double(done) / double(total_);
  char rate_text[64];
  std::snprintf(rate_text, sizeof rate_text, rate >= 10 ? "%.0f %s/s" : "%.2f %s/s", rate, unit_.c_str());
  if (tty_) {
    const int width = 24, filled = int(frac * width);
    std::string bar(size_t(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r\033[K%s [%s] %ld/%ld %s %s %s%s", label_.c_str(), bar.c_str(), long(done), long(total_),
                 rate_text, final ? ("in " + format_duration(elapsed)).c_str() : ("ETA " + format_duration(eta)).c_str(),
                 detail.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s %ld/%ld (%.0f%%) %s %s %s\n", label_.c_str(), long(done), long(total_), 100 * frac,
                 rate_text, final ? ("done in " + format_duration(elapsed)).c_str() : ("ETA " + format_duration(eta)).c_str(),
                 detail.c_str());
  }
  std::fflush(stderr);
}

}  // namespace fca
