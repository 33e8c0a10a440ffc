// Signal-driven stop requests (see header).
#include "wg/train/stop_request.h"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

namespace wg {

namespace {
std::atomic<int> g_signal{0};  // lock-free: written by the waiting thread or the fallback handler
extern "C" void on_stop_signal(int signal) { g_signal = signal; }

sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  sigaddset(&s, SIGTERM);
  return s;
}

// A child process (an MPI daemon) gets the stop signals back.
extern "C" void unblock_stop_signals() {
  const sigset_t s = stop_signals();
  pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
}
}  // namespace

void install_stop_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    // A thread running compute never takes the signal: with it blocked here,
    // before any other thread starts, every later thread (OpenMP's, the
    // loader's, MPI's) inherits the mask, and one thread waits for the
    // signals in sigwait. A handler interrupting oneDNN's sgemm corrupted the
    // heap in a few percent of stops (docs/distributed.md). The handler stays
    // for threads started before this call (tests), which do not block them.
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    const sigset_t s = stop_signals();
    pthread_sigmask(SIG_BLOCK, &s, nullptr);
    pthread_atfork(nullptr, nullptr, unblock_stop_signals);
    std::thread([s] {
      for (;;) {
        int signal = 0;
        if (sigwait(&s, &signal) == 0) g_signal = signal;
      }
    }).detach();
  });
}

bool stop_requested() { return g_signal.load() != 0; }
int stop_signal() { return g_signal.load(); }
void request_stop_for_testing(int signal) { g_signal = signal; }

}  // namespace wg
