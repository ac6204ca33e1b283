// Ordering guarantees, proved against a real gpustreamd: gated work does not
// run before its flag is signalled, and event and queue dependencies hold
// across queues.
#include <atomic>
#include <thread>

#include "client/gpustream.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace gpustream {
namespace {

using client::Queue;

class OrderingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = testing::DaemonProcess::Start();
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    auto c = client::Client::Connect(daemon_->unix_target());
    ASSERT_TRUE(c.ok()) << c.status();
    auto session = c->open_session();
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

  std::unique_ptr<testing::DaemonProcess> daemon_;
  std::unique_ptr<client::Session> session_;
  client::Buffer counter_;
};

TEST_F(OrderingTest, GatedWorkWaitsForItsFlag) {
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

TEST_F(OrderingTest, EqualWaitIgnoresOtherValuesGreaterEqualDoesNot) {
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

TEST_F(OrderingTest, EventDependencyHoldsAcrossQueues) {
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

TEST_F(OrderingTest, QueueWaitsForAnotherQueue) {
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

TEST_F(OrderingTest, QueueWritesFlagHostWaits) {
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

TEST_F(OrderingTest, HostFuncBlocksLaterWorkUntilItReturns) {
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

TEST_F(OrderingTest, PipelinedLaunchesRunInOrder) {
  auto cell = session_->allocate(4);
  ASSERT_TRUE(cell.ok());
  Queue& q = session_->default_queue();
  // 2000 fills of increasing values: the last one enqueued wins.
  for (uint32_t i = 1; i <= 2000; ++i) {
    q.launch("samples", "fill_u32", {1}, {1}, {*cell, i, uint64_t{1}});
  }
  auto out = q.read<uint32_t>(*cell, 1);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], 2000u);
}

}  // namespace
}  // namespace gpustream
