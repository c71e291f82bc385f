// PhaseClock splits a call's time into phases: Add(total) adds the time since
// the last Add (or construction) to `total`, in seconds.
#pragma once

#include <chrono>

namespace wds::gpu {

class PhaseClock {
 public:
  void Add(double& total) {
    const Clock::time_point now = Clock::now();
    total += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_ = Clock::now();
};

}  // namespace wds::gpu
