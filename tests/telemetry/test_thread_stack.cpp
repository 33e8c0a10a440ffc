// Tests of the thread-stack floor (telemetry/thread_stack) in a process with
// more static TLS than civetweb's 100 KiB thread stacks hold, as wgtrain has
// with LibTorch: the floor is what the dynamic linker binds to, and the
// endpoint's civetweb threads start and run on 1 MiB stacks.
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <prometheus/metric_family.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <vector>

#include "http_client.h"
#include "wg/telemetry/metrics_endpoint.h"
#include "wg/telemetry/thread_stack.h"

using namespace wg::telemetry;
using wg::telemetry::testing::http_get;

// 256 KiB of static TLS in this test binary, standing in for LibTorch's: glibc
// carves it out of every thread's stack. (A test fixture, not state.)
thread_local char wg_test_static_tls[256 * 1024];

namespace {

constexpr size_t kCivetwebStack = 100 * 1024;  // Debian's civetweb: USE_STACK_SIZE=102400

void* touch_tls(void*) {
  wg_test_static_tls[0] = 1;
  wg_test_static_tls[sizeof wg_test_static_tls - 1] = 1;
  return nullptr;
}

size_t current_stack_size() {
  pthread_attr_t attr;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstacksize(&attr, &size);
    pthread_attr_destroy(&attr);
  }
  return size;
}

// Records the stack size of the thread that collects: a civetweb worker.
class StackProbe : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    stack_.store(current_stack_size());
    return {};
  }
  size_t stack() const { return stack_.load(); }

 private:
  mutable std::atomic<size_t> stack_{0};
};

}  // namespace

TEST(TelemetryThreadStack, CivetwebsStackSizeFailsWithThisMuchStaticTls) {
  // libc's own function, past the floor: the failure civetweb would meet.
  using Real = int (*)(pthread_attr_t*, size_t);
  auto real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  ASSERT_NE(real, nullptr);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  ASSERT_EQ(real(&attr, kCivetwebStack), 0);
  pthread_t t;
  const int rc = pthread_create(&t, &attr, touch_tls, nullptr);
  if (rc == 0) pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(rc, EINVAL) << "a 100 KiB stack should not hold 256 KiB of static TLS";
}

TEST(TelemetryThreadStack, TheFloorIsWhatLibrariesBindTo) {
  EXPECT_TRUE(thread_stack_floor_active())
      << "pthread_attr_setstacksize is not exported from the executable (--export-dynamic-symbol)";
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, kCivetwebStack), 0);
  size_t size = 0;
  pthread_attr_getstacksize(&attr, &size);
  EXPECT_EQ(size, kThreadStackFloor);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 8 * kThreadStackFloor), 0);  // larger requests pass unchanged
  pthread_attr_getstacksize(&attr, &size);
  EXPECT_EQ(size, 8 * kThreadStackFloor);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, &attr, touch_tls, nullptr), 0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
}

TEST(TelemetryThreadStack, CivetwebThreadsStartOnTheFloor) {
  auto probe = std::make_shared<StackProbe>();
  std::string error;
  auto endpoint = MetricsEndpoint::start(probe, "127.0.0.1", 0, &error);
  ASSERT_NE(endpoint, nullptr) << error;
  EXPECT_EQ(http_get(endpoint->port(), "/metrics").status, 200);
  EXPECT_GE(probe->stack(), kThreadStackFloor);
}
