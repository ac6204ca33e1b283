// Graphs on the CUDA backend, on the fake driver: runs of launches, copies
// and fills are captured once into an executable graph and each launch of
// the graph is one cuGraphLaunch, on any queue of the device; the capture
// leaves the daemon's other threads free to make the calls a capture
// would forbid them in CUDA's default (global) mode.
#include <dlfcn.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/backend/cuda/cuda_fake_testing.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/backend/graph.h"

namespace gpustream::backend {
namespace {

// The fake's count of cuGraphLaunch calls (fakegpu_graph_launches).
uint64_t GraphLaunches() {
  void* library = dlopen(FakeCudaDriverPath().c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(library, nullptr) << "the fake driver is not loaded";
  if (library == nullptr) return 0;
  auto count = reinterpret_cast<uint64_t (*)()>(
      dlsym(library, "fakegpu_graph_launches"));
  dlclose(library);
  EXPECT_NE(count, nullptr);
  return count != nullptr ? count() : 0;
}

class CudaGraphFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = OpenCudaDriver(FakeCudaDriverPath());
    ASSERT_TRUE(opened.ok()) << opened.status();
    adapter_ = *std::move(opened);
    auto created = OpenCudaDevice(adapter_, 0);
    ASSERT_TRUE(created.ok()) << created.status();
    device_ = *std::move(created);
    modules_ = device_->BuiltinModules();
    ASSERT_FALSE(modules_.empty());
    add_ = *modules_.front()->FindKernel("add_u64");
  }

  std::shared_ptr<const CudaAdapter> adapter_;
  std::unique_ptr<GpuDevice> device_;
  std::vector<std::unique_ptr<Module>> modules_;
  const Kernel* add_ = nullptr;
};

TEST_F(CudaGraphFakeTest, RunsOfCommandsLaunchAsOneExecutableGraph) {
  auto counter = *device_->Allocate(8, MemoryKind::kDevice);
  auto copy = *device_->Allocate(8, MemoryKind::kDevice);
  auto event = *device_->CreateEvent(/*enable_timing=*/false);
  // A fill and 50 launches (one graph), an event record (one by one), a
  // copy and a launch (a second graph).
  std::vector<GraphCommand> commands;
  commands.push_back(GraphFill{counter, 0, 8, 0});
  for (int i = 0; i < 50; ++i) {
    commands.push_back(
        GraphLaunch{add_, {{1}, {1}}, {BufferArg{counter}, uint64_t{1}}});
  }
  commands.push_back(GraphRecordEvent{event});
  commands.push_back(GraphCopy{counter, 0, copy, 0, 8});
  commands.push_back(
      GraphLaunch{add_, {{1}, {1}}, {BufferArg{copy}, uint64_t{100}}});
  auto graph = std::make_shared<const Graph>(std::move(commands));

  auto q = *device_->CreateQueue(QueueOptions{});
  auto other = *device_->CreateQueue(QueueOptions{});
  const uint64_t before = GraphLaunches();
  ASSERT_TRUE(q->LaunchGraph(graph, nullptr).ok());
  ASSERT_TRUE(q->LaunchGraph(graph, nullptr).ok());
  EXPECT_EQ(ReadU64(*q, counter).value_or(0), 50u);
  EXPECT_EQ(ReadU64(*q, copy).value_or(0), 150u);
  // The same executable graphs from another queue, after the first's.
  ASSERT_TRUE(other->WaitQueue(*q).ok());
  ASSERT_TRUE(other->LaunchGraph(graph, nullptr).ok());
  EXPECT_EQ(ReadU64(*other, copy).value_or(0), 150u);
  EXPECT_EQ(GraphLaunches() - before, 6u);
}

// The capture is the capturing thread's own: a free on another thread
// (the daemon's cleanup thread frees at any time, and a free synchronizes
// the context) neither fails nor breaks it.
TEST_F(CudaGraphFakeTest, CaptureLeavesOtherThreadsFreeing) {
  ASSERT_TRUE(device_->MakeCurrent().ok());
  auto stream = adapter_->StreamCreate(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto memory = adapter_->MemAlloc(256);
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_TRUE(adapter_->StreamBeginCapture(*stream).ok());
  ASSERT_TRUE(adapter_->MemsetD32Async(*memory, 1, 4, *stream).ok());
  absl::Status freed = absl::UnknownError("not run");
  std::thread cleanup([&] {
    if (absl::Status s = device_->MakeCurrent(); !s.ok()) {
      freed = s;
      return;
    }
    auto other = adapter_->MemAlloc(256);
    freed = other.ok() ? adapter_->MemFree(*other) : other.status();
  });
  cleanup.join();
  EXPECT_TRUE(freed.ok()) << freed;
  auto exec = adapter_->StreamEndCapture(*stream);
  ASSERT_TRUE(exec.ok()) << exec.status();
  ASSERT_TRUE(adapter_->GraphLaunch(*exec, *stream).ok());
  ASSERT_TRUE(adapter_->StreamSynchronize(*stream).ok());
  EXPECT_TRUE(adapter_->GraphExecDestroy(*exec).ok());
  EXPECT_TRUE(adapter_->StreamDestroy(*stream).ok());
  EXPECT_TRUE(adapter_->MemFree(*memory).ok());
}

}  // namespace
}  // namespace gpustream::backend
