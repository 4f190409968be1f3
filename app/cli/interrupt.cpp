#include "app/cli/interrupt.h"

namespace qs::cli {
namespace {

std::atomic<bool> gInterrupted{false};  // lock-free: safe to store from a signal handler
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void onInterrupt(int sig) {
  if (gInterrupted.exchange(true)) {  // the second Ctrl-C: end now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

InterruptScope::InterruptScope() {
  gInterrupted = false;
  struct sigaction sa {};
  sa.sa_handler = onInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &previous_);
}

InterruptScope::~InterruptScope() { sigaction(SIGINT, &previous_, nullptr); }

const std::atomic<bool>* InterruptScope::flag() const { return &gInterrupted; }

}  // namespace qs::cli
