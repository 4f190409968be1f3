#include "app/cli/terminal_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace qs::cli {

TerminalProgress::TerminalProgress() : enabled_(::isatty(STDERR_FILENO) == 1) {}

TerminalProgress::~TerminalProgress() {
  if (enabled_ && drawn_) std::fprintf(stderr, "\r\033[K");
}

namespace {
std::string duration(double s) {
  char b[48];
  if (s < 60) std::snprintf(b, sizeof b, "%.0f s", s);
  else if (s < 3600) std::snprintf(b, sizeof b, "%d min %d s", int(s / 60), int(s) % 60);
  else std::snprintf(b, sizeof b, "%d h %d min", int(s / 3600), int(s / 60) % 60);
  return b;
}
}  // namespace

std::string TerminalProgress::timeText(double elapsed, double from, double now) {
  std::string t = duration(elapsed) + " elapsed";
  const double done = now - from;
  if (elapsed >= 1.0 && done > 1e-3 && now < 1.0) t += ", ~" + duration(elapsed * (1.0 - now) / done) + " left";
  return t;
}

void TerminalProgress::update(double fraction, std::string_view stage) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const std::string_view job = stage.substr(0, stage.find(':'));
  if (start_ == std::chrono::steady_clock::time_point{} || job != job_ || fraction < lastFraction_ - 1e-9) {
    start_ = now;
    startFraction_ = fraction;
    job_ = std::string(job);
  }
  lastFraction_ = fraction;
  // Redraw at most ~20 times a second; always draw the final state.
  if (drawn_ && fraction < 1.0 && now - last_ < std::chrono::milliseconds(50)) return;
  last_ = now;
  drawn_ = true;
  constexpr int kWidth = 30;
  const double f = std::clamp(fraction, 0.0, 1.0);
  const int filled = int(f * kWidth + 0.5);
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, ' ');
  const std::string times =
      timeText(std::chrono::duration<double>(now - start_).count(), startFraction_, f);
  std::fprintf(stderr, "\r\033[K[%s] %3d%% %.*s  (%s)", bar.c_str(), int(f * 100 + 0.5),
               int(std::min<size_t>(stage.size(), 60)), stage.data(), times.c_str());
  std::fflush(stderr);
}

}  // namespace qs::cli
