// core/timer.hpp: wall-clock timing.
//
// Layer: core (std only). Steady clock, seconds as double. Local.
#pragma once

#include <chrono>

namespace trident {

/// Wall-clock stopwatch started at construction.
class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  /// Seconds since construction or the last reset().
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace trident
