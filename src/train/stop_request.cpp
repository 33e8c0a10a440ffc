// Signal-driven stop requests (see header).
#include "wg/train/stop_request.h"

#include <csignal>

namespace wg {

namespace {
volatile std::sig_atomic_t g_signal = 0;  // written only by the handler
extern "C" void on_stop_signal(int signal) { g_signal = signal; }
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal() { return int(g_signal); }
void request_stop_for_testing(int signal) { g_signal = signal; }

}  // namespace wg
