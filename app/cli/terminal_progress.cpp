#include "app/cli/terminal_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace qs::cli {

TerminalProgress::TerminalProgress() : enabled_(::isatty(STDERR_FILENO) == 1) {}

TerminalProgress::~TerminalProgress() {
  if (enabled_ && drawn_) std::fprintf(stderr, "\r\033[K");
}

void TerminalProgress::update(double fraction, std::string_view stage) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  // Redraw at most ~20 times a second; always draw the final state.
  if (drawn_ && fraction < 1.0 && now - last_ < std::chrono::milliseconds(50)) return;
  last_ = now;
  drawn_ = true;
  constexpr int kWidth = 30;
  const double f = std::clamp(fraction, 0.0, 1.0);
  const int filled = int(f * kWidth + 0.5);
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, ' ');
  std::fprintf(stderr, "\r\033[K[%s] %3d%% %.*s", bar.c_str(), int(f * 100 + 0.5),
               int(std::min<size_t>(stage.size(), 60)), stage.data());
  std::fflush(stderr);
}

}  // namespace qs::cli
