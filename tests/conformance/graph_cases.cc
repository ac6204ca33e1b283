// Conformance: graph launches (Queue::LaunchGraph) on every backend. Long
// graphs run to the end (the CPU backend yields between turns), a graph's
// RecordEvent is recorded on each launch for other queues to wait on, the
// launch's end event completes after its last command, and a cancelled
// queue drops the rest of a graph with its records still completing.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/backend/graph.h"
#include "tests/conformance/device_conformance.h"

namespace gpustream::backend {
namespace {

// A graph of `n` add_u64(counter, 1) launches, then `tail`.
std::shared_ptr<const Graph> Adds(const Kernel& add,
                                  std::shared_ptr<Buffer> counter, int n,
                                  std::vector<GraphCommand> tail = {}) {
  std::vector<GraphCommand> commands;
  for (int i = 0; i < n; ++i) {
    commands.push_back(
        GraphLaunch{&add, {}, {BufferArg{counter}, uint64_t{1}}});
  }
  for (auto& c : tail) commands.push_back(std::move(c));
  return std::make_shared<const Graph>(std::move(commands));
}

TEST_P(DeviceConformanceTest, LongGraphsRunToTheEndOnEveryLaunch) {
  auto counter = Alloc(8);
  auto q = NewQueue(), other = NewQueue();
  ASSERT_TRUE(q->Fill(counter, 0, 8, 0).ok());
  // Far more than one CPU turn (20 us) of launches.
  auto graph = Adds(K("add_u64"), counter, 3000);
  auto done = *device_->CreateEvent(false);
  ASSERT_TRUE(q->LaunchGraph(graph, done).ok());
  ASSERT_TRUE(other->WaitEvent(done).ok());
  ASSERT_TRUE(other->LaunchGraph(graph, done).ok());
  ASSERT_TRUE(Sync(*other).ok());
  EXPECT_EQ(ReadU64(*other, counter), 6000u);
  EXPECT_TRUE(done->IsComplete());
}

TEST_P(DeviceConformanceTest, AGraphsRecordEventIsRecordedOnEachLaunch) {
  auto counter = Alloc(8), seen = Alloc(8);
  auto gate = *device_->CreateFlag();
  auto event = *device_->CreateEvent(false);
  auto q = NewQueue(), observer = NewQueue();
  ASSERT_TRUE(q->Fill(counter, 0, 8, 0).ok());
  ASSERT_TRUE(Sync(*q).ok());
  // wait(gate >= 1); add; record: the record completes only after the add.
  std::vector<GraphCommand> commands;
  commands.push_back(GraphWaitFlag{gate, 1, WaitCondition::kGreaterEqual});
  commands.push_back(
      GraphLaunch{&K("add_u64"), {}, {BufferArg{counter}, uint64_t{1}}});
  commands.push_back(GraphRecordEvent{event});
  auto graph = std::make_shared<const Graph>(std::move(commands));
  ASSERT_TRUE(q->LaunchGraph(graph, nullptr).ok());
  // The observer copies the counter once the graph's record is reached.
  ASSERT_TRUE(observer->WaitEvent(event).ok());
  ASSERT_TRUE(observer->Copy(counter, 0, seen, 0, 8).ok());
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(event->IsComplete());
  gate->Store(1);
  ASSERT_TRUE(Sync(*observer).ok());
  EXPECT_EQ(ReadU64(*observer, seen), 1u);
  // The next launch records it again: a new point to wait for.
  ASSERT_TRUE(Sync(*q).ok());
  gate->Store(0);
  ASSERT_TRUE(q->LaunchGraph(graph, nullptr).ok());
  ASSERT_TRUE(observer->WaitEvent(event).ok());
  ASSERT_TRUE(observer->Copy(counter, 0, seen, 0, 8).ok());
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(event->IsComplete()) << "the second launch did not record it";
  gate->Store(1);
  ASSERT_TRUE(Sync(*observer).ok());
  EXPECT_EQ(ReadU64(*observer, seen), 2u);
}

TEST_P(DeviceConformanceTest, CancelDropsTheRestOfAGraphAndItsRecordsComplete) {
  auto counter = Alloc(8);
  auto gate = *device_->CreateFlag();
  auto event = *device_->CreateEvent(false);
  auto parked = *device_->CreateEvent(false);
  auto done = *device_->CreateEvent(false);
  auto q = NewQueue();
  ASSERT_TRUE(q->Fill(counter, 0, 8, 0).ok());
  ASSERT_TRUE(Sync(*q).ok());
  std::vector<GraphCommand> tail;
  tail.push_back(GraphRecordEvent{parked});
  tail.push_back(GraphWaitFlag{gate, 1, WaitCondition::kEqual});
  tail.push_back(
      GraphLaunch{&K("add_u64"), {}, {BufferArg{counter}, uint64_t{1000}}});
  tail.push_back(GraphRecordEvent{event});
  ASSERT_TRUE(
      q->LaunchGraph(Adds(K("add_u64"), counter, 10, std::move(tail)), done)
          .ok());
  // The ten adds ran; the queue is parked on the gate.
  auto reached = std::make_shared<absl::Notification>();
  parked->OnComplete([reached] { reached->Notify(); });
  ASSERT_TRUE(reached->WaitForNotificationWithTimeout(absl::Seconds(10)));
  q->Cancel(absl::CancelledError("test cancel"));
  gate->Release(absl::CancelledError("test cancel"));
  EXPECT_EQ(Sync(*q).code(), absl::StatusCode::kCancelled);
  // Nobody waits forever on the records the cancel dropped.
  auto other = NewQueue();
  ASSERT_TRUE(other->WaitEvent(event).ok());
  ASSERT_TRUE(other->WaitEvent(done).ok());
  ASSERT_TRUE(Sync(*other).ok());
  EXPECT_EQ(ReadU64(*other, counter), 10u);  // The gated add never ran.
}

}  // namespace
}  // namespace gpustream::backend
