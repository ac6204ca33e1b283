// Checks of the GPU layer's graphs that every vendor's fake driver runs
// (cuda_graph_fake_test, hip_graph_fake_test): runs of launches, copies and
// fills become one executable graph launched once per LaunchGraph on any
// queue, and a capture leaves the daemon's other threads free to allocate
// and free (which a capture in the vendors' default, global, mode would
// forbid them). Header-only, for tests.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_CHECKS_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_CHECKS_H_

#include <dlfcn.h>

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

// A fill and 50 add_u64 launches (one executable graph), an event record
// (one by one), a copy and a launch (a second graph): launched twice on
// one queue and once on another, six graph launches in all, with the
// values each launch must leave.
inline void CheckRunsLaunchAsExecutableGraphs(GpuDevice& device,
                                              const std::string& fake_path) {
  std::vector<std::unique_ptr<Module>> modules = device.BuiltinModules();
  ASSERT_FALSE(modules.empty());
  absl::StatusOr<const Kernel*> add = modules.front()->FindKernel("add_u64");
  ASSERT_TRUE(add.ok()) << add.status();
  auto counter = *device.Allocate(8, MemoryKind::kDevice);
  auto copy = *device.Allocate(8, MemoryKind::kDevice);
  auto event = *device.CreateEvent(/*enable_timing=*/false);
  std::vector<GraphCommand> commands;
  commands.push_back(GraphFill{counter, 0, 8, 0});
  for (int i = 0; i < 50; ++i) {
    commands.push_back(
        GraphLaunch{*add, {{1}, {1}}, {BufferArg{counter}, uint64_t{1}}});
  }
  commands.push_back(GraphRecordEvent{event});
  commands.push_back(GraphCopy{counter, 0, copy, 0, 8});
  commands.push_back(
      GraphLaunch{*add, {{1}, {1}}, {BufferArg{copy}, uint64_t{100}}});
  auto graph = std::make_shared<const Graph>(std::move(commands));

  auto q = *device.CreateQueue(QueueOptions{});
  auto other = *device.CreateQueue(QueueOptions{});
  const uint64_t before = FakeGraphLaunches(fake_path);
  ASSERT_TRUE(q->LaunchGraph(graph, nullptr).ok());
  ASSERT_TRUE(q->LaunchGraph(graph, nullptr).ok());
  EXPECT_EQ(ReadU64(*q, counter).value_or(0), 50u);
  EXPECT_EQ(ReadU64(*q, copy).value_or(0), 150u);
  // The same executable graphs from another queue, after the first's.
  ASSERT_TRUE(other->WaitQueue(*q).ok());
  ASSERT_TRUE(other->LaunchGraph(graph, nullptr).ok());
  EXPECT_EQ(ReadU64(*other, copy).value_or(0), 150u);
  EXPECT_EQ(FakeGraphLaunches(fake_path) - before, 6u);
}

// Captures a fill on a stream of `device` while another thread allocates
// and frees (the daemon's cleanup thread frees at any time, and a free
// synchronizes the context): neither the free nor the capture fails.
inline void CheckCaptureLeavesOtherThreadsFreeing(GpuDevice& device) {
  const GpuDriver& driver = device.driver();
  ASSERT_TRUE(device.MakeCurrent().ok());
  auto stream = driver.StreamCreate(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto memory = driver.MemAlloc(256);
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_TRUE(driver.StreamBeginCapture(*stream).ok());
  ASSERT_TRUE(driver.MemsetD32Async(*memory, 1, 4, *stream).ok());
  absl::Status freed = absl::UnknownError("not run");
  std::thread cleanup([&] {
    if (absl::Status s = device.MakeCurrent(); !s.ok()) {
      freed = s;
      return;
    }
    auto other = driver.MemAlloc(256);
    freed = other.ok() ? driver.MemFree(*other) : other.status();
  });
  cleanup.join();
  EXPECT_TRUE(freed.ok()) << freed;
  auto exec = driver.StreamEndCapture(*stream);
  ASSERT_TRUE(exec.ok()) << exec.status();
  ASSERT_TRUE(driver.GraphLaunch(*exec, *stream).ok());
  ASSERT_TRUE(driver.StreamSynchronize(*stream).ok());
  EXPECT_TRUE(driver.GraphExecDestroy(*exec).ok());
  EXPECT_TRUE(driver.StreamDestroy(*stream).ok());
  EXPECT_TRUE(driver.MemFree(*memory).ok());
}

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_GRAPH_CHECKS_H_
