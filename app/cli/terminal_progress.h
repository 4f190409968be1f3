#pragma once
// Progress on stderr for long CLI commands, only when stderr is a terminal, so that --json output
// on stdout and logs of scripted runs stay clean. The line shows the bar, the stage (jobs put
// their counts there: "sensitivity: 12/211 cells measured"), the time since the current job
// started and the time left at the rate so far (once there is a rate to go by). A new job starts
// when the fraction falls or the stage's name (the text before ':') changes.
#include <chrono>
#include <string>
#include <string_view>

namespace qs::cli {

class TerminalProgress {
 public:
  TerminalProgress();  // enabled iff stderr is a TTY
  ~TerminalProgress();  // clears the line
  void update(double fraction, std::string_view stage);
  bool enabled() const { return enabled_; }
  // "12 s elapsed, ~1 min 5 s left" for a job that started `elapsed` seconds ago at fraction
  // `from` and is at `now`; without " left" while the rate is unknown (no progress yet, or the
  // first second).
  static std::string timeText(double elapsed, double from, double now);

 private:
  bool enabled_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
  std::chrono::steady_clock::time_point start_{};  // the current job's start
  double startFraction_ = 0, lastFraction_ = 0;
  std::string job_;  // the stage's name: the text before ':'
};

}  // namespace qs::cli
