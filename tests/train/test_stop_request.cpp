// Stop requests: the stop signals are blocked in the thread that installs
// them and in every thread it starts afterwards, and one waiting thread
// takes them, so no compute thread is interrupted by a handler. No LibTorch.
#include "wg/train/stop_request.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <chrono>
#include <csignal>
#include <thread>

namespace wg {
namespace {

bool blocked_here(int signal) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, signal) == 1;
}

TEST(StopRequest, ASignalSetsTheFlagWithoutInterruptingLaterThreads) {
  install_stop_handlers();
  install_stop_handlers();  // idempotent
  EXPECT_TRUE(blocked_here(SIGUSR1));
  EXPECT_TRUE(blocked_here(SIGTERM));
  bool child_blocks = false;
  std::thread([&] { child_blocks = blocked_here(SIGUSR1) && blocked_here(SIGTERM); }).join();
  EXPECT_TRUE(child_blocks) << "a thread started later would run the handler";
  request_stop_for_testing(0);
  ASSERT_FALSE(stop_requested());
  ASSERT_EQ(::kill(::getpid(), SIGUSR1), 0);
  for (int i = 0; i < 500 && !stop_requested(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(stop_requested());
  EXPECT_EQ(stop_signal(), SIGUSR1);
  request_stop_for_testing(0);  // the rest of the binary runs without a stop request
}

}  // namespace
}  // namespace wg
