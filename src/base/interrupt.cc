#include "wds/base/interrupt.h"

#include <utility>

namespace wds {
namespace {

// The calling thread's innermost check (a stack linked through previous_).
thread_local ScopedInterruptCheck* current_check = nullptr;

}  // namespace

ScopedInterruptCheck::ScopedInterruptCheck(InterruptCheck check)
    : check_(std::move(check)), previous_(current_check) {
  current_check = this;
}

ScopedInterruptCheck::~ScopedInterruptCheck() { current_check = previous_; }

absl::Status CheckInterrupt() {
  if (current_check == nullptr || !current_check->check_) return absl::OkStatus();
  return current_check->check_();
}

bool InterruptCheckInstalled() { return current_check != nullptr; }

}  // namespace wds
