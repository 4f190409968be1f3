#pragma once
// Ctrl-C as a cancellation: while an InterruptScope lives, the first SIGINT sets a flag a
// JobContext reads (the job stops at its next check and the command keeps what it finished);
// a second SIGINT ends the process at once, as without the scope. The previous handler comes
// back when the scope ends. One scope at a time (the CLI runs one command).
#include <atomic>
#include <csignal>

namespace qs::cli {

class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  const std::atomic<bool>* flag() const;
  bool interrupted() const { return flag()->load(); }

 private:
  struct sigaction previous_ {};
};

}  // namespace qs::cli
