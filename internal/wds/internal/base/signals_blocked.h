// SignalsBlocked: threads that take no asynchronous signals.
//
//   {
//     const wds::SignalsBlocked helpers_take_no_signals;
//     std::thread helper(...);   // inherits the blocked mask
//   }                            // the caller's mask is back
#pragma once

#include <pthread.h>
#include <signal.h>

namespace wds {

// SignalsBlocked blocks the asynchronous signals in the calling thread while
// it lives, so that the threads it starts inherit that mask: a SIGINT or
// SIGTERM sent to the process then goes to one of the application's threads,
// never to a worker (runtimes such as Python's run their signal handlers
// only in the main thread, which a signal taken by a worker would not wake).
// The signals a thread raises itself stay deliverable.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t blocked;
    sigfillset(&blocked);
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS, SIGPIPE}) {
      sigdelset(&blocked, s);
    }
    pthread_sigmask(SIG_BLOCK, &blocked, &previous_);
  }
  ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace wds
