// Side threads and OpenMP's binding: under OMP_PROC_BIND the process's first
// thread is bound to one place and threads started later inherit it;
// unbind_side_thread() widens the calling thread to every place and leaves
// the others alone. Without a binding it changes nothing.
#include "wg/util/side_thread.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "../common/openmp_places.h"

namespace wg {
namespace {

using test::openmp_place_cpus;
using test::thread_cpus;

// A new thread's CPUs before and after it calls unbind_side_thread().
struct NewThread {
  std::set<int> inherited, after;
  SideThreadCpus result;
};
NewThread unbind_in_a_new_thread() {
  NewThread t;
  std::thread([&] {
    t.inherited = thread_cpus();
    t.result = unbind_side_thread("test thread");
    t.after = thread_cpus();
  }).join();
  return t;
}

TEST(UnderOpenMpBinding, ASideThreadWidensToEveryPlace) {
  if (const char* why = test::no_openmp_binding_here()) GTEST_SKIP() << why;
  const std::set<int> places = openmp_place_cpus(), first = thread_cpus();
  ASSERT_LT(first.size(), places.size()) << "libgomp did not bind the first thread";
  const NewThread t = unbind_in_a_new_thread();
  EXPECT_EQ(t.inherited, first) << "a new thread inherits the first thread's binding";
  EXPECT_EQ(t.after, places);
  EXPECT_EQ(t.result.error, 0);
  EXPECT_EQ(t.result.before, int(first.size()));
  EXPECT_EQ(t.result.after, int(places.size()));
  EXPECT_EQ(thread_cpus(), first) << "the calling thread alone changes";
}

TEST(SideThread, WithoutAnOpenMpBindingNothingChanges) {
  if (!openmp_place_cpus().empty()) GTEST_SKIP() << "OpenMP binds threads in this process";
  const NewThread t = unbind_in_a_new_thread();
  EXPECT_EQ(t.after, t.inherited);
  EXPECT_EQ(t.result.error, 0);
  EXPECT_EQ(t.result.before, int(t.inherited.size()));
  EXPECT_EQ(t.result.after, t.result.before);
}

}  // namespace
}  // namespace wg
