// Ordering guarantees, proved against a real gpustreamd on every backend:
// gated work does not run before its flag is signalled, and event and queue
// dependencies hold across queues.
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "client/gpustream.h"
#include "gtest/gtest.h"
#include "tests/backend_daemon.h"
#include "tests/conformance/backend_under_test.h"

namespace gpustream {
namespace {

using client::Queue;

// Parameterized by the backend; also run on cuda_fake without device-side
// flag waits (testing::kCudaFakeNoWaitValue), where the daemon holds gated
// work itself.
class OrderingTest : public testing::BackendDaemonTest {
 protected:
  void SetUp() override {
    BackendDaemonTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto c = client::Client::Connect(daemon_->unix_target());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
    auto session = client_->open_session();
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    auto counter = session_->allocate(8);
    ASSERT_TRUE(counter.ok());
    counter_ = *std::move(counter);
  }

  // Reads the counter on a queue of its own (so the read is not gated).
  uint64_t Counter(Queue& q) {
    auto v = q.read<uint64_t>(counter_, 1);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? (*v)[0] : ~uint64_t{0};
  }

  void Add(Queue& q, uint64_t value) {
    q.launch("samples", "add_u64", {1}, {1}, {counter_, value});
  }

  std::optional<client::Client> client_;
  std::unique_ptr<client::Session> session_;
  client::Buffer counter_;
};

TEST_P(OrderingTest, GatedWorkWaitsForItsFlag) {
  client::Flag gate = session_->create_flag();
  Queue gated = session_->create_queue();
  Queue observer = session_->create_queue();
  gated.wait_for_host_value(gate, 1);
  Add(gated, 5);
  ASSERT_TRUE(session_->flush().ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Counter(observer), 0u);
  EXPECT_FALSE(*gated.is_idle());
  ASSERT_TRUE(gate.signal(1).ok());
  ASSERT_TRUE(gated.synchronize(absl::Seconds(10)).ok());
  EXPECT_EQ(Counter(observer), 5u);
}

TEST_P(OrderingTest, EqualWaitIgnoresOtherValuesGreaterEqualDoesNot) {
  client::Flag gate = session_->create_flag();
  Queue equal = session_->create_queue(), at_least = session_->create_queue();
  Queue observer = session_->create_queue();
  equal.wait_for_host_value(gate, 3, client::WaitCondition::kEqual);
  Add(equal, 100);
  at_least.wait_for_host_value(gate, 3, client::WaitCondition::kGreaterEqual);
  Add(at_least, 1);
  ASSERT_TRUE(gate.signal(7).ok());
  ASSERT_TRUE(at_least.synchronize(absl::Seconds(10)).ok());
  EXPECT_EQ(Counter(observer), 1u);  // 7 >= 3 passes; 7 == 3 does not.
  EXPECT_FALSE(*equal.is_idle());
  ASSERT_TRUE(gate.signal(3).ok());
  ASSERT_TRUE(equal.synchronize(absl::Seconds(10)).ok());
  EXPECT_EQ(Counter(observer), 101u);
}

TEST_P(OrderingTest, EventDependencyHoldsAcrossQueues) {
  auto value = session_->allocate(4), copy = session_->allocate(4);
  ASSERT_TRUE(value.ok() && copy.ok());
  Queue producer = session_->create_queue(),
        consumer = session_->create_queue();
  // Slow producer: without the event the consumer's copy would run first
  // and read zero.
  producer.launch("samples", "spin_ns", {1}, {1}, {uint64_t{100'000'000}});
  producer.fill(*value, 0, 4, 0xfeed);
  client::Event filled = producer.record_event();
  consumer.wait_for(filled);
  consumer.copy(*value, 0, *copy, 0, 4);
  auto out = consumer.read<uint32_t>(*copy, 1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], 0xfeedu);
}

TEST_P(OrderingTest, QueueWaitsForAnotherQueue) {
  auto value = session_->allocate(4), copy = session_->allocate(4);
  ASSERT_TRUE(value.ok() && copy.ok());
  Queue producer = session_->create_queue(),
        consumer = session_->create_queue();
  producer.launch("samples", "spin_ns", {1}, {1}, {uint64_t{100'000'000}});
  producer.fill(*value, 0, 4, 0xbeef);
  consumer.wait_for(producer);
  consumer.copy(*value, 0, *copy, 0, 4);
  // Work enqueued on the producer after the wait is not waited for.
  client::Flag never = session_->create_flag();
  producer.wait_for_host_value(never, 1);
  auto out = consumer.read<uint32_t>(*copy, 1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], 0xbeefu);
}

TEST_P(OrderingTest, QueueWritesFlagHostWaits) {
  client::Flag done = session_->create_flag();
  Queue q = session_->create_queue();
  Add(q, 9);
  q.write_flag(done, 42);
  auto seen = done.wait(42, client::WaitCondition::kEqual, absl::Seconds(10));
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, 42u);
  Queue observer = session_->create_queue();
  EXPECT_EQ(Counter(observer), 9u);  // The write came after the kernel.
}

TEST_P(OrderingTest, HostFuncBlocksLaterWorkUntilItReturns) {
  Queue q = session_->create_queue();
  Queue observer = session_->create_queue();
  std::atomic<uint64_t> seen_inside{~uint64_t{0}};
  Add(q, 1);
  q.enqueue_host_func([&] {
    absl::SleepFor(absl::Milliseconds(100));
    // The first add has run; the second must not have.
    seen_inside = Counter(observer);
  });
  Add(q, 10);
  ASSERT_TRUE(q.synchronize(absl::Seconds(10)).ok());
  EXPECT_EQ(seen_inside.load(), 1u);
  EXPECT_EQ(Counter(observer), 11u);
}

TEST_P(OrderingTest, PipelinedLaunchesRunInOrder) {
  auto cell = session_->allocate(4);
  ASSERT_TRUE(cell.ok());
  Queue& q = session_->default_queue();
  // 2000 fills of increasing values: the last one enqueued wins.
  for (uint32_t i = 1; i <= 2000; ++i) {
    q.launch("samples", "fill_u32", {1}, {1}, {*cell, i, uint64_t{1}});
  }
  const absl::Status filled = q.synchronize(absl::Seconds(10));
  EXPECT_TRUE(filled.ok()) << filled;
  auto out = q.read<uint32_t>(*cell, 1);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], 2000u);
}

TEST_P(OrderingTest, DeviceSaysWhereQueuesWaitOnFlags) {
  auto devices = client_->list_devices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_FALSE(devices->empty());
  const v1::Device& device = devices->front();
  // Native waits need the device's 64-bit stream memory operations;
  // without them the daemon holds the gated work, with the same semantics.
  // HIP has them, but the daemon holds its waits all the same (5.x runs
  // each as a spinning kernel on a shared hardware queue, and its
  // GREATER_EQUAL does not wrap around).
  if (testing::IsHip(backend())) {
    EXPECT_TRUE(device.supports_wait_value());
    EXPECT_EQ(device.wait_value_mode(), "daemon");
    return;
  }
  EXPECT_EQ(device.wait_value_mode(),
            device.supports_wait_value() ? "native" : "daemon");
  if (backend() == testing::kCudaFakeNoWaitValue) {
    EXPECT_FALSE(device.supports_wait_value());
    EXPECT_EQ(device.wait_value_mode(), "daemon");
  } else if (backend() == "cpu" || backend() == "cuda_fake") {
    EXPECT_TRUE(device.supports_wait_value());
    EXPECT_EQ(device.wait_value_mode(), "native");
  }
}

TEST_P(OrderingTest, GreaterEqualWaitHoldsAcrossWrapAround) {
  // GREATER_EQUAL is CUDA's (int64_t)(flag - value) >= 0: a counter that
  // wraps past 2^64 still satisfies a wait set just before the wrap.
  constexpr uint64_t kNearTheTop = UINT64_MAX - 1;
  client::Flag ticks = session_->create_flag();
  // 4 short of the value (0, the start, would be 2 past it).
  ASSERT_TRUE(ticks.signal(UINT64_MAX - 5).ok());
  Queue gated = session_->create_queue();
  Queue observer = session_->create_queue();
  gated.wait_for_host_value(ticks, kNearTheTop,
                            client::WaitCondition::kGreaterEqual);
  Add(gated, 1);
  ASSERT_TRUE(session_->flush().ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Counter(observer), 0u);
  EXPECT_FALSE(*gated.is_idle());
  ASSERT_TRUE(ticks.signal(1).ok());  // Wrapped: 3 past the value.
  ASSERT_TRUE(gated.synchronize(absl::Seconds(10)).ok());
  EXPECT_EQ(Counter(observer), 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, OrderingTest,
                         ::testing::ValuesIn(conformance::BackendsUnderTest()),
                         testing::BackendName);
INSTANTIATE_TEST_SUITE_P(
    DaemonHeldWaits, OrderingTest,
    ::testing::Values(std::string(testing::kCudaFakeNoWaitValue)),
    testing::BackendName);

}  // namespace
}  // namespace gpustream
