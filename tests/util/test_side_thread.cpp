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

TEST(UnderOpenMpBinding, ASideThreadWidensToEveryPlace) {
  if (const char* why = test::no_openmp_binding_here()) GTEST_SKIP() << why;
  const std::set<int> places = openmp_place_cpus(), first = thread_cpus();
  ASSERT_LT(first.size(), places.size()) << "libgomp did not bind the first thread";
  std::set<int> inherited, widened;
  SideThreadCpus r;
  std::thread([&] {
    inherited = thread_cpus();
    r = unbind_side_thread();
    widened = thread_cpus();
  }).join();
  EXPECT_EQ(inherited, first) << "a new thread inherits the first thread's binding";
  EXPECT_EQ(widened, places);
  EXPECT_EQ(r.error, 0);
  EXPECT_EQ(r.before, int(first.size()));
  EXPECT_EQ(r.after, int(places.size()));
  EXPECT_EQ(thread_cpus(), first) << "the calling thread alone changes";
}

TEST(SideThread, WithoutAnOpenMpBindingNothingChanges) {
  if (!openmp_place_cpus().empty()) GTEST_SKIP() << "OpenMP binds threads in this process";
  std::set<int> before, after;
  SideThreadCpus r;
  std::thread([&] {
    before = thread_cpus();
    r = unbind_side_thread();
    after = thread_cpus();
  }).join();
  EXPECT_EQ(after, before);
  EXPECT_EQ(r.error, 0);
  EXPECT_EQ(r.before, int(before.size()));
  EXPECT_EQ(r.after, r.before);
}

}  // namespace
}  // namespace wg
