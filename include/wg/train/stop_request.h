// Stop requests from outside: SIGUSR1 (Slurm's --signal=B:USR1@T) and
// SIGTERM (the time limit, scancel) only set a flag; the training loop reads
// it between steps, and all ranks agree on the step to stop at. The flag is
// process-wide. install_stop_handlers (first thing in main, before any
// other thread starts) blocks both signals in every thread and has one
// thread wait for them (sigwait): no handler runs on a compute thread.
#pragma once

namespace wg {

void install_stop_handlers();
bool stop_requested();
int stop_signal();  // the signal that asked, 0 if none
void request_stop_for_testing(int signal);

}  // namespace wg
