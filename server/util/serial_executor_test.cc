// Tests of SerialExecutor: order, own thread, drain on destruction.
#include "server/util/serial_executor.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gpustream::util {
namespace {

TEST(SerialExecutorTest, RunsInPostOrderOnItsOwnThread) {
  std::vector<int> order;
  std::thread::id ran_on;
  SerialExecutor executor;
  for (int i = 0; i < 100; ++i) {
    executor.Post([&, i] {
      order.push_back(i);
      ran_on = std::this_thread::get_id();
      EXPECT_TRUE(executor.InExecutor());
    });
  }
  executor.Drain();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(executor.InExecutor());
}

TEST(SerialExecutorTest, DestructorRunsWhatWasPostedIncludingReposts) {
  int runs = 0;
  {
    SerialExecutor executor;
    executor.Post([&] {
      ++runs;
      executor.Post([&] { ++runs; });
    });
  }
  EXPECT_EQ(runs, 2);
}

}  // namespace
}  // namespace gpustream::util
