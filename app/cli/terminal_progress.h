#pragma once
// Progress on stderr for long CLI commands, only when stderr is a terminal, so that --json output
// on stdout and logs of scripted runs stay clean.
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

 private:
  bool enabled_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace qs::cli
