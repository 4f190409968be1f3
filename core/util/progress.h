#pragma once
// Progress and cancellation for long jobs. A job receives a JobContext; it calls progress() now
// and then and checkCancelled() between units of work. Both cost nothing when nobody listens.
#include <atomic>
#include <functional>
#include <string_view>

#include "kernels/common/error.h"

namespace qs {

struct JobContext {
  // fraction in [0, 1]; stage is a short human-readable label ("reading tensors")
  std::function<void(double fraction, std::string_view stage)> onProgress;
  const std::atomic<bool>* cancelFlag = nullptr;

  void progress(double fraction, std::string_view stage) const {
    if (onProgress) onProgress(fraction, stage);
  }
  bool cancelled() const { return cancelFlag && cancelFlag->load(std::memory_order_relaxed); }
  void checkCancelled() const {
    if (cancelled()) throw Error(ErrorKind::Cancelled, "cancelled by the user");
  }
};

}  // namespace qs
