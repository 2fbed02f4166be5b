// Progress of long work on stderr: a redrawn bar with rate and ETA on a terminal, plain lines
// (at most one every few seconds, plus the last) otherwise, so logs stay readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace fca {

class Progress {
 public:
  // total: number of units (steps, windows); unit: their name for the rate ("step", "window").
  Progress(std::string label, int64_t total, std::string unit);
  // Reports that `done` units are finished; `detail` is shown after the bar (e.g. "loss 1.234").
  void update(int64_t done, const std::string& detail = "");
  // Prints a line of its own (above the bar on a terminal).
  void note(const std::string& line);
  // Ends the bar's line (terminal) or prints the last plain line.
  void finish(const std::string& detail = "");
  double elapsed_seconds() const;

 private:
  void draw(int64_t done, const std::string& detail, bool final);
  std::string label_, unit_;
  int64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool finished_ = false;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"

}  // namespace fca
