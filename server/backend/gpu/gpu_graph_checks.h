// Checks of the GPU layer's graphs that every vendor's fake driver runs
// (cuda_graph_fake_test, hip_graph_fake_test): runs of launches, copies and
// fills become one executable graph launched once per LaunchGraph on any
// queue, and captures survive the daemon's other threads allocating and
// freeing beside them. Header-only, for tests.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_CHECKS_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_CHECKS_H_

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/gpu/gpu_testing.h"
#include "server/backend/graph.h"

namespace gpustream::backend {

// The fake driver's count of graph launches (fakegpu_graph_launches of
// the library at `fake_path`, loaded already).
inline uint64_t FakeGraphLaunches(const std::string& fake_path) {
  void* library = dlopen(fake_path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(library, nullptr) << fake_path << " is not loaded";
  if (library == nullptr) return 0;
  auto count = reinterpret_cast<uint64_t (*)()>(
      dlsym(library, "fakegpu_graph_launches"));
  dlclose(library);
  EXPECT_NE(count, nullptr) << fake_path << " lacks fakegpu_graph_launches";
  return count != nullptr ? count() : 0;
}

// A write and 50 add_u64 launches (one executable graph), an event record
// (one by one), a copy, a write and a launch (a second graph, only if a
// write can be in one): launched twice on one queue and once on another,
// six graph launches in all, with the values each launch must leave.
inline void CheckRunsLaunchAsExecutableGraphs(GpuDevice& device,
                                              const std::string& fake_path) {
  std::vector<std::unique_ptr<Module>> modules = device.BuiltinModules();
  ASSERT_FALSE(modules.empty());
  absl::StatusOr<const Kernel*> add = modules.front()->FindKernel("add_u64");
  ASSERT_TRUE(add.ok()) << add.status();
  auto counter = *device.Allocate(8, MemoryKind::kDevice);
  auto copy = *device.Allocate(8, MemoryKind::kDevice);
  auto event = *device.CreateEvent(/*enable_timing=*/false);
  auto u64 = [](uint64_t v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  std::vector<GraphCommand> commands;
  commands.push_back(GraphWrite{counter, 0, u64(1000)});
  for (int i = 0; i < 50; ++i) {
    commands.push_back(
        GraphLaunch{*add, {{1}, {1}}, {BufferArg{counter}, uint64_t{1}}});
  }
  commands.push_back(GraphRecordEvent{event});
  commands.push_back(GraphCopy{counter, 0, copy, 0, 8});
  commands.push_back(GraphWrite{counter, 0, u64(7)});
  commands.push_back(
      GraphLaunch{*add, {{1}, {1}}, {BufferArg{copy}, uint64_t{100}}});
  auto graph = std::make_shared<const Graph>(std::move(commands));

  auto q = *device.CreateQueue(QueueOptions{});
  auto other = *device.CreateQueue(QueueOptions{});
  const uint64_t before = FakeGraphLaunches(fake_path);
  ASSERT_TRUE(q->LaunchGraph(graph, nullptr).ok());
  ASSERT_TRUE(q->LaunchGraph(graph, nullptr).ok());
  EXPECT_EQ(ReadU64(*q, counter).value_or(0), 7u);
  EXPECT_EQ(ReadU64(*q, copy).value_or(0), 1150u);
  // The same executable graphs from another queue, after the first's.
  ASSERT_TRUE(other->WaitQueue(*q).ok());
  ASSERT_TRUE(other->LaunchGraph(graph, nullptr).ok());
  EXPECT_EQ(ReadU64(*other, copy).value_or(0), 1150u);
  EXPECT_EQ(FakeGraphLaunches(fake_path) - before, 6u);
}

// Graphs captured while another thread allocates and drops pinned host
// memory. Each drop frees it on the device's cleanup thread, which
// synchronizes the context, and no capture survives that; the allocation
// is a call the capture's mode must leave other threads free to make. No
// capture fails (a launch that meets a free goes one by one instead), some
// are launched natively, every launch leaves its values, and every
// allocation succeeds.
inline void CheckCapturesBesideFrees(GpuDevice& device,
                                     const std::string& fake_path) {
  std::vector<std::unique_ptr<Module>> modules = device.BuiltinModules();
  ASSERT_FALSE(modules.empty());
  absl::StatusOr<const Kernel*> add = modules.front()->FindKernel("add_u64");
  ASSERT_TRUE(add.ok()) << add.status();
  auto q = *device.CreateQueue(QueueOptions{});
  auto counter = *device.Allocate(8, MemoryKind::kDevice);

  std::atomic<bool> stop{false};
  absl::Status churned;
  int allocations = 0;
  std::thread churn([&] {
    for (; allocations < 100000 && !stop.load(); ++allocations) {
      auto buffer = device.Allocate(4096, MemoryKind::kHostPinned);
      if (!buffer.ok()) {
        churned = buffer.status();
        return;
      }
    }
  });
  constexpr int kGraphs = 100;
  const uint64_t before = FakeGraphLaunches(fake_path);
  for (int g = 0; g < kGraphs; ++g) {
    std::vector<GraphCommand> commands;
    commands.push_back(GraphFill{counter, 0, 8, 0});
    for (int i = 0; i < 3; ++i) {
      commands.push_back(GraphLaunch{
          *add, {{1}, {1}}, {BufferArg{counter}, uint64_t{uint64_t(g)}}});
    }
    ASSERT_TRUE(
        q->LaunchGraph(std::make_shared<const Graph>(std::move(commands)),
                       nullptr)
            .ok());
    EXPECT_EQ(ReadU64(*q, counter).value_or(0), 3u * g);
  }
  stop = true;
  churn.join();
  EXPECT_TRUE(churned.ok()) << churned;
  EXPECT_GT(allocations, 0);
  EXPECT_EQ(device.capture_failures(), 0u) << "a free broke a capture";
  EXPECT_GT(FakeGraphLaunches(fake_path) - before, 0u);
  device.FlushCleanup();
}

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_CHECKS_H_
