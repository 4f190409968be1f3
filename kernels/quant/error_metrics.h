#pragma once
// How far a quantised tensor is from its reference. Sums are accumulated in double.
//   mse      Σ(x - x̂)² / n
//   sqnrDb   10·log10(Σx² / Σ(x - x̂)²); +inf when x̂ == x exactly (zero error, even for an
//            all-zero x); -inf when x is all zero but x̂ is not
//   maxAbs   max |x - x̂|
//   cosine   x·x̂ / (‖x‖‖x̂‖); 1 when both are all zero, 0 when exactly one is
// NaN or Inf in either input is ErrorKind::BadInput naming the tensor and the position.
#include <cstdint>
#include <span>
#include <string_view>

namespace qs {

struct ErrorMetrics {
  uint64_t count = 0;
  double mse = 0;
  double sqnrDb = 0;
  double maxAbsError = 0;
  double cosine = 1;
  double signalPower = 0;  // Σx² / n, for context
};

ErrorMetrics compareTensors(std::span<const float> reference, std::span<const float> approx,
                            std::string_view tensorName = {});

}  // namespace qs
