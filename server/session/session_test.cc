// Unit tests of one session against the CPU backend: ids, validation,
// ordering of async completions, and teardown.
#include "server/session/session.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/session/recording_sink.h"
#include "server/session/validation.h"

namespace gpustream::session {
namespace {

using ::absl::StatusCode;

class SessionTest : public ::testing::Test {
 protected:
  const std::shared_ptr<tenants::Tenant> tenant_ =
      std::make_shared<tenants::Tenant>("tenant", false, 1, v1::Quota());
  SessionTest()
      : device_(backend::CpuDeviceOptions{1 << 20}),
        modules_(*modules::ModuleRegistry::Create(device_, {})) {
    SessionLimits limits;
    limits.max_queues = 3;
    limits.max_objects = 16;
    session_ = *Session::Create(
        "s1", {"tenant", "test", 0, "s-1"},
        {&device_, modules_.get(), &timer_, limits, tenant_, /*key=*/1});
  }

  uint64_t NewBuffer(uint64_t id, uint64_t size) {
    v1::AllocateBufferRequest req;
    req.set_id(id);
    req.set_size_bytes(size);
    v1::AllocateBufferResponse resp;
    EXPECT_TRUE(session_->AllocateBuffer(req, &resp).ok());
    return resp.buffer_id();
  }

  // Synchronizes the queue and returns the status.
  absl::Status Sync(uint64_t queue_id, uint32_t timeout_ms = 0) {
    v1::SynchronizeQueueRequest req;
    req.set_queue_id(queue_id);
    req.set_timeout_ms(timeout_ms);
    absl::Notification done;
    absl::Status status;
    session_->SynchronizeQueue(req, nullptr, [&](absl::Status s) {
      status = s;
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  }

  std::string Read(uint64_t queue_id, uint64_t buffer_id, uint64_t size) {
    v1::ReadBufferRequest req;
    req.set_queue_id(queue_id);
    req.set_buffer_id(buffer_id);
    req.set_size(size);
    v1::ReadBufferResponse resp;
    absl::Notification done;
    session_->ReadBuffer(req, &resp, [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      done.Notify();
    });
    done.WaitForNotification();
    return resp.data();
  }

  absl::Status Launch(uint64_t queue, const std::string& kernel,
                      std::vector<v1::KernelArg> args, uint32_t grid = 1,
                      uint32_t block = 1) {
    v1::LaunchKernelRequest req;
    req.set_queue_id(queue);
    req.set_module("samples");
    req.set_kernel(kernel);
    req.mutable_grid()->set_x(grid);
    req.mutable_block()->set_x(block);
    for (auto& a : args) *req.add_args() = a;
    v1::LaunchKernelResponse resp;
    return session_->LaunchKernel(req, &resp);
  }

  static v1::KernelArg Buf(uint64_t id) {
    v1::KernelArg a;
    a.mutable_buffer()->set_buffer_id(id);
    return a;
  }
  static v1::KernelArg U64(uint64_t v) {
    v1::KernelArg a;
    a.set_u64(v);
    return a;
  }
  static v1::KernelArg U32(uint32_t v) {
    v1::KernelArg a;
    a.set_u32(v);
    return a;
  }

  util::TimerThread timer_;
  backend::CpuDevice device_;
  std::unique_ptr<modules::ModuleRegistry> modules_;
  std::shared_ptr<Session> session_;
};

TEST_F(SessionTest, ClientAndServerIdsShareOneSpace) {
  EXPECT_GE(session_->default_queue_id(), kFirstServerId);
  v1::CreateFlagRequest flag;
  flag.set_id(5);
  v1::CreateFlagResponse flag_resp;
  ASSERT_TRUE(session_->CreateFlag(flag, &flag_resp).ok());
  EXPECT_EQ(flag_resp.flag_id(), 5u);

  v1::CreateEventRequest event;
  event.set_id(5);  // Taken by the flag: one id space.
  v1::CreateEventResponse event_resp;
  EXPECT_EQ(session_->CreateEvent(event, &event_resp).code(),
            StatusCode::kAlreadyExists);
  event.set_id(kFirstServerId + 9);
  auto s = session_->CreateEvent(event, &event_resp);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("server-assigned range"), std::string::npos);
  event.set_id(0);
  ASSERT_TRUE(session_->CreateEvent(event, &event_resp).ok());
  EXPECT_GT(event_resp.event_id(), session_->default_queue_id());

  // A flag id used where a queue id is expected is "not a queue".
  v1::WriteFlagRequest write;
  write.set_queue_id(5);
  write.set_flag_id(5);
  v1::WriteFlagResponse write_resp;
  auto wrong_kind = session_->WriteFlag(write, &write_resp);
  EXPECT_EQ(wrong_kind.code(), StatusCode::kNotFound);
  EXPECT_NE(wrong_kind.message().find("queue_id 5"), std::string::npos);
}

TEST_F(SessionTest, QueueQuotaIsEnforced) {
  v1::CreateQueueRequest req;
  v1::CreateQueueResponse resp;
  ASSERT_TRUE(session_->CreateQueue(req, &resp).ok());
  ASSERT_TRUE(session_->CreateQueue(req, &resp).ok());
  // The default queue counts: 3 of 3.
  EXPECT_EQ(session_->CreateQueue(req, &resp).code(),
            StatusCode::kResourceExhausted);
  req.set_priority(-1);
  EXPECT_EQ(session_->CreateQueue(req, &resp).code(), StatusCode::kOutOfRange);

  // The default queue cannot go, and is named so, not by its id.
  v1::DestroyQueueRequest destroy;
  destroy.set_queue_id(session_->default_queue_id());
  v1::DestroyQueueResponse destroyed;
  absl::Status refused;
  session_->DestroyQueue(destroy, &destroyed,
                         [&](absl::Status s) { refused = std::move(s); });
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("the default queue"), std::string::npos);
  EXPECT_EQ(refused.message().find(absl::StrCat(session_->default_queue_id())),
            std::string::npos)
      << refused;
}

// Launch configuration: clusters must divide the grid (INVALID_ARGUMENT)
// and fit max_cluster_size (OUT_OF_RANGE); a cooperative grid must fit
// what the device holds resident (OUT_OF_RANGE); ranks come back through
// block_rank_u32.
TEST_F(SessionTest, LaunchConfigurationIsValidatedAndRuns) {
  const uint64_t q = session_->default_queue_id();
  const uint64_t b = NewBuffer(1, 4096);
  auto launch = [&](const std::string& kernel, uint32_t grid,
                    uint32_t cluster_x, uint32_t cluster_y, bool cooperative) {
    v1::LaunchKernelRequest req;
    req.set_queue_id(q);
    req.set_module("samples");
    req.set_kernel(kernel);
    req.mutable_grid()->set_x(grid);
    req.mutable_block()->set_x(1);
    req.mutable_cluster()->set_x(cluster_x);
    req.mutable_cluster()->set_y(cluster_y);
    req.set_cooperative(cooperative);
    *req.add_args() = Buf(b);
    v1::LaunchKernelResponse resp;
    return session_->LaunchKernel(req, &resp);
  };
  absl::Status s = launch("block_rank_u32", 12, 8, 0, false);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("not a multiple of cluster"), std::string::npos);
  s = launch("block_rank_u32", 16, 16, 0, false);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("max_cluster_size 8"), std::string::npos) << s;
  s = launch("block_rank_u32", 16, 0, 2, false);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("cluster.x"), std::string::npos) << s;
  s = launch("grid_barrier_u32", 257, 0, 0, true);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("at most 256 blocks"), std::string::npos) << s;
  // 64 blocks of one thread in clusters of 4; the cooperative barrier over
  // 32 blocks writes 64 words.
  ASSERT_TRUE(launch("block_rank_u32", 64, 4, 0, false).ok());
  std::string bytes = Read(q, b, 64 * 4);
  ASSERT_EQ(bytes.size(), 64u * 4);
  for (uint32_t i = 0; i < 64; ++i) {
    uint32_t rank;
    std::memcpy(&rank, bytes.data() + 4 * i, 4);
    EXPECT_EQ(rank, i % 4) << i;
  }
  ASSERT_TRUE(launch("grid_barrier_u32", 32, 0, 0, true).ok());
  bytes = Read(q, b, 64 * 4);
  uint32_t last;
  std::memcpy(&last, bytes.data() + 63 * 4, 4);
  EXPECT_EQ(last, 32u * 33 / 2);
}

// A device without clusters or cooperative launches answers UNIMPLEMENTED
// naming the device (as HIP's does).
TEST(LaunchShapeTest, FeaturesTheDeviceLacksAreUnimplemented) {
  backend::DeviceInfo device;
  device.backend = "hip";
  device.name = "AMD Instinct MI210";
  device.max_grid = {1024, 1024, 1024};
  device.max_block = {1024, 1024, 64};
  device.max_threads_per_block = 1024;
  device.max_shared_memory_bytes = 65536;
  backend::KernelSignature kernel;
  kernel.name = "noop";
  kernel.limits.max_dynamic_shared_memory_bytes = 65536;
  v1::LaunchKernelRequest req;
  req.mutable_grid()->set_x(8);
  req.mutable_block()->set_x(1);
  req.mutable_cluster()->set_x(2);
  auto config = CheckLaunchShape(req, device, kernel);
  EXPECT_EQ(config.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(config.status().message().find("AMD Instinct MI210"),
            std::string::npos)
      << config.status();
  req.clear_cluster();
  req.set_cooperative(true);
  config = CheckLaunchShape(req, device, kernel);
  EXPECT_EQ(config.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(config.status().message().find("cooperative"), std::string::npos);
  // All-zero cluster means none: accepted.
  req.set_cooperative(false);
  req.mutable_cluster();
  config = CheckLaunchShape(req, device, kernel);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->clustered);
}

TEST_F(SessionTest, LaunchValidatesBeforeTheDevice) {
  const uint64_t q = session_->default_queue_id();
  const uint64_t b = NewBuffer(1, 16);
  EXPECT_EQ(Launch(q, "fill_u32", {Buf(b), U32(1)}).code(),
            StatusCode::kInvalidArgument);  // Arg count.
  auto kind = Launch(q, "fill_u32", {Buf(b), U64(1), U64(4)});
  EXPECT_EQ(kind.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(kind.message().find("args[1]"), std::string::npos);
  auto foreign = Launch(q, "fill_u32", {Buf(77), U32(1), U64(4)});
  EXPECT_EQ(foreign.code(), StatusCode::kNotFound);
  EXPECT_NE(foreign.message().find("args[0].buffer_id 77"), std::string::npos);
  EXPECT_EQ(Launch(q, "fill_u32", {Buf(b), U32(1), U64(4)}, 0).code(),
            StatusCode::kInvalidArgument);  // grid.x == 0.
  EXPECT_EQ(Launch(q, "fill_u32", {Buf(b), U32(1), U64(4)}, 1, 2048).code(),
            StatusCode::kOutOfRange);  // Beyond max block.
  EXPECT_EQ(Launch(q, "nosuch", {}).code(), StatusCode::kNotFound);
  ASSERT_TRUE(Launch(q, "fill_u32", {Buf(b), U32(9), U64(4)}, 1, 4).ok());
  std::string bytes = Read(q, b, 16);
  uint32_t v[4];
  std::memcpy(v, bytes.data(), 16);
  EXPECT_EQ(v[0], 9u);
  EXPECT_EQ(v[3], 9u);
}

TEST_F(SessionTest, BufferRangesAreChecked) {
  const uint64_t q = session_->default_queue_id();
  const uint64_t b = NewBuffer(1, 16);
  v1::WriteBufferRequest write;
  write.set_queue_id(q);
  write.set_buffer_id(b);
  write.set_offset(10);
  write.set_data(std::string(8, 'x'));
  v1::WriteBufferResponse write_resp;
  auto s = session_->WriteBuffer(write, &write_resp);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("buffer_id 1 of 16 bytes"), std::string::npos);
  v1::FillBufferRequest fill;
  fill.set_queue_id(q);
  fill.set_buffer_id(b);
  fill.set_size(6);
  v1::FillBufferResponse fill_resp;
  EXPECT_EQ(session_->FillBuffer(fill, &fill_resp).code(),
            StatusCode::kInvalidArgument);
  fill.set_size(8);
  fill.set_offset(UINT64_MAX - 3);  // Overflow must not wrap around.
  EXPECT_EQ(session_->FillBuffer(fill, &fill_resp).code(),
            StatusCode::kOutOfRange);
}

// The extent arithmetic on a kernel with signed counts and per-thread
// bytes: exact fits pass, one byte more, a negative count and an overflow
// of grid x block do not.
TEST(BufferExtentTest, SignedCountsAndThreadsAreBounded) {
  backend::KernelSignature sig;
  sig.name = "k";
  sig.params = {backend::ParamKind::kBuffer, backend::ParamKind::kI32,
                backend::ParamKind::kBuffer};
  sig.extents = {backend::BufferExtent{.bytes = 16,
                                       .bytes_per_element = 4,
                                       .count_param = 1,
                                       .bytes_per_thread = 2},
                 std::nullopt, std::nullopt};
  sig.param_names = {"out", "n", "unbounded"};
  v1::LaunchKernelRequest req;
  req.set_module("m");
  req.set_kernel("k");
  req.add_args()->mutable_buffer()->set_offset(8);
  req.add_args()->set_i32(10);
  req.add_args()->mutable_buffer()->set_offset(8);
  backend::LaunchConfig config;
  config.grid = {2, 1, 1};
  config.block = {3, 1, 1};
  // 16 + 4 * 10 + 2 * 6 = 68 bytes from offset 8.
  EXPECT_TRUE(CheckBufferExtent(req, sig, config, 0, 76).ok());
  const absl::Status over = CheckBufferExtent(req, sig, config, 0, 75);
  EXPECT_EQ(over.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(over.message(),
            "args[0]: kernel m.k param 0 (out) reaches 68 bytes for a count "
            "of 10 (args[1]) from offset 8, past the end of buffer_id 0 (75 "
            "bytes)");
  req.mutable_args(1)->set_i32(-1);
  const absl::Status negative = CheckBufferExtent(req, sig, config, 0, 1000);
  EXPECT_EQ(negative.code(), StatusCode::kOutOfRange);
  EXPECT_NE(negative.message().find("counted by args[1], which is negative "
                                    "(-1)"),
            std::string::npos)
      << negative;
  req.mutable_args(1)->set_i64(-5);  // An I64 count reads the same way.
  const absl::Status negative64 = CheckBufferExtent(req, sig, config, 0, 1000);
  EXPECT_NE(negative64.message().find("which is negative (-5)"),
            std::string::npos)
      << negative64;
  req.mutable_args(1)->set_i32(0);
  config.grid = {0x7fffffff, 0xffff, 0xffff};
  config.block = {1024, 1, 1};  // 2^73 threads: the product overflows.
  const absl::Status threads = CheckBufferExtent(req, sig, config, 0, 1000);
  EXPECT_EQ(threads.code(), StatusCode::kOutOfRange);
  EXPECT_NE(threads.message().find("more than 2^64 - 1 bytes"),
            std::string::npos)
      << threads;
  // A BUFFER param without an extent is not checked (the kernel is
  // unchecked, which the tenant check handles).
  EXPECT_FALSE(sig.checked());
  EXPECT_TRUE(CheckBufferExtent(req, sig, config, 2, 8).ok());
}

TEST_F(SessionTest, DeviceFaultIsStickyThenFailedPrecondition) {
  const uint64_t q = session_->default_queue_id();
  // trap faults on purpose (a fill past its buffer is refused before the
  // device now: declared extents).
  ASSERT_TRUE(Launch(q, "trap", {}).ok());
  EXPECT_EQ(Sync(q).code(), StatusCode::kInternal);
  EXPECT_EQ(Sync(q).code(), StatusCode::kInternal);  // Sticky.
  EXPECT_EQ(Launch(q, "noop", {}).code(), StatusCode::kFailedPrecondition);
}

TEST_F(SessionTest, DeviceFaultIsPublishedAsQueueError) {
  RecordingSink sink(v1::Notification::kQueueError);
  session_->notifications().Attach(&sink);
  const uint64_t q = session_->default_queue_id();
  ASSERT_TRUE(Launch(q, "trap", {}).ok());
  ASSERT_TRUE(sink.got.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(sink.first.queue_error().queue_id(), q);
  EXPECT_EQ(sink.first.queue_error().error().code(),
            static_cast<int>(StatusCode::kInternal));
  session_->notifications().Detach(&sink);
}

TEST_F(SessionTest, SynchronizeTimesOutWithoutCancellingWork) {
  const uint64_t q = session_->default_queue_id();
  ASSERT_TRUE(Launch(q, "spin_ns", {U64(300'000'000)}).ok());
  EXPECT_EQ(Sync(q, 20).code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Sync(q).ok());
}

TEST_F(SessionTest, HostWaitOnFlagTimesOutThenSucceeds) {
  v1::CreateFlagRequest create;
  create.set_id(3);
  v1::CreateFlagResponse created;
  ASSERT_TRUE(session_->CreateFlag(create, &created).ok());
  v1::WaitFlagRequest wait;
  wait.set_flag_id(3);
  wait.set_value(2);
  wait.set_condition(v1::WAIT_CONDITION_GREATER_EQUAL);
  wait.set_timeout_ms(20);
  v1::WaitFlagResponse resp;
  absl::Notification timed_out;
  session_->WaitFlag(wait, &resp, [&](absl::Status s) {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
    timed_out.Notify();
  });
  timed_out.WaitForNotification();
  wait.set_timeout_ms(0);
  absl::Notification satisfied;
  session_->WaitFlag(wait, &resp, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    satisfied.Notify();
  });
  v1::SignalFlagRequest signal;
  signal.set_flag_id(3);
  signal.set_value(5);
  v1::SignalFlagResponse signaled;
  ASSERT_TRUE(session_->SignalFlag(signal, &signaled).ok());
  satisfied.WaitForNotification();
  EXPECT_EQ(resp.value(), 5u);
}

TEST_F(SessionTest, TeardownReleasesWaitsAndMemory) {
  const uint64_t q = session_->default_queue_id();
  const uint64_t free_before = device_.memory().free_bytes;
  const uint64_t b = NewBuffer(1, 4096);
  v1::CreateFlagRequest create;
  create.set_id(2);
  v1::CreateFlagResponse created;
  ASSERT_TRUE(session_->CreateFlag(create, &created).ok());
  v1::WaitHostValueRequest gate;
  gate.set_queue_id(q);
  gate.set_flag_id(2);
  gate.set_value(1);
  v1::WaitHostValueResponse gated;
  ASSERT_TRUE(session_->WaitHostValue(gate, &gated).ok());
  ASSERT_TRUE(Launch(q, "fill_u32", {Buf(b), U32(1), U64(4)}).ok());
  v1::WaitFlagRequest wait;
  wait.set_flag_id(2);
  wait.set_value(99);
  v1::WaitFlagResponse waited;
  absl::Notification released;
  session_->WaitFlag(wait, &waited, [&](absl::Status s) {
    EXPECT_EQ(s.code(), StatusCode::kCancelled);
    released.Notify();
  });
  EXPECT_LT(device_.memory().free_bytes, free_before);
  session_->Teardown(absl::CancelledError("test teardown"));
  EXPECT_TRUE(released.HasBeenNotified());
  EXPECT_EQ(device_.memory().free_bytes, free_before);
  v1::CreateQueueRequest req;
  v1::CreateQueueResponse resp;
  EXPECT_EQ(session_->CreateQueue(req, &resp).code(), StatusCode::kNotFound);
}

TEST_F(SessionTest, HostFuncPublishesNotification) {
  RecordingSink sink(v1::Notification::kHostFuncReached);
  session_->notifications().Attach(&sink);
  v1::EnqueueHostFuncRequest req;
  req.set_queue_id(session_->default_queue_id());
  req.set_callback_id(1234);
  v1::EnqueueHostFuncResponse resp;
  ASSERT_TRUE(session_->EnqueueHostFunc(req, &resp).ok());
  ASSERT_TRUE(sink.got.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(sink.first.host_func_reached().callback_id(), 1234u);
  session_->notifications().Detach(&sink);
}

// Graph limits, in process (the capture rules run end to end on every
// backend in tests/graph_test.cc).
TEST_F(SessionTest, GraphCommandLimitQuotaAndCharges) {
  v1::Quota quota;
  quota.set_max_graphs(1);
  tenant_->Update(false, 1, quota);
  const uint64_t q = session_->default_queue_id();
  const uint64_t buf = NewBuffer(1, 64);
  auto begin = [&] {
    v1::BeginCaptureRequest req;
    req.set_queue_id(q);
    v1::BeginCaptureResponse resp;
    return session_->BeginCapture(req, &resp);
  };
  auto end = [&](uint64_t* graph_id) {
    v1::EndCaptureRequest req;
    req.set_queue_id(q);
    v1::EndCaptureResponse resp;
    absl::Status s = session_->EndCapture(req, &resp);
    *graph_id = resp.graph_id();
    return s;
  };
  auto fill = [&] {
    v1::FillBufferRequest req;
    req.set_queue_id(q);
    req.set_buffer_id(buf);
    req.set_size(4);
    req.set_value(7);
    v1::FillBufferResponse resp;
    return session_->FillBuffer(req, &resp);
  };
  ASSERT_TRUE(begin().ok());
  for (size_t i = 0; i < backend::kMaxGraphCommands; ++i) {
    ASSERT_TRUE(fill().ok()) << i;
  }
  absl::Status over = fill();
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted) << over;
  EXPECT_NE(over.message().find("65536"), std::string::npos) << over;
  // The write's bytes are charged to the tenant while the graph owns them.
  v1::WriteBufferRequest write;
  write.set_queue_id(q);
  write.set_buffer_id(buf);
  write.set_data(std::string(16, 'x'));
  v1::WriteBufferResponse written;
  EXPECT_EQ(session_->WriteBuffer(write, &written).code(),
            StatusCode::kResourceExhausted);  // Still full.
  uint64_t first = 0;
  ASSERT_TRUE(end(&first).ok());
  EXPECT_EQ(tenant_->graphs(), 1u);

  // quota.max_graphs: the second EndCapture is refused and the capture goes
  // on, losing nothing.
  const uint64_t memory_before = tenant_->memory_bytes();
  ASSERT_TRUE(begin().ok());
  ASSERT_TRUE(session_->WriteBuffer(write, &written).ok());
  EXPECT_EQ(tenant_->memory_bytes(), memory_before + 16);
  uint64_t second = 0;
  absl::Status refused = end(&second);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("quota.max_graphs"), std::string::npos);
  v1::DestroyGraphRequest destroy;
  destroy.set_graph_id(first);
  v1::DestroyGraphResponse destroyed;
  ASSERT_TRUE(session_->DestroyGraph(destroy, &destroyed).ok());
  EXPECT_EQ(tenant_->graphs(), 0u);
  ASSERT_TRUE(end(&second).ok());
  EXPECT_EQ(tenant_->graphs(), 1u);
  EXPECT_EQ(session_->DestroyGraph(destroy, &destroyed).code(),
            StatusCode::kNotFound);

  v1::LaunchGraphRequest launch;
  launch.set_queue_id(q);
  launch.set_graph_id(second);
  v1::LaunchGraphResponse launched;
  ASSERT_TRUE(session_->LaunchGraph(launch, &launched).ok());
  EXPECT_EQ(Read(q, buf, 16), std::string(16, 'x'));

  // A buffer freed while a graph uses it keeps its memory and quota until
  // the graph goes.
  const uint64_t held = NewBuffer(2, 32);
  const uint64_t with_held = tenant_->memory_bytes();
  ASSERT_TRUE(begin().ok());
  v1::FillBufferRequest fill_held;
  fill_held.set_queue_id(q);
  fill_held.set_buffer_id(held);
  fill_held.set_size(32);
  v1::FillBufferResponse filled;
  ASSERT_TRUE(session_->FillBuffer(fill_held, &filled).ok());
  destroy.set_graph_id(second);
  ASSERT_TRUE(session_->DestroyGraph(destroy, &destroyed).ok());
  uint64_t third = 0;
  ASSERT_TRUE(end(&third).ok());
  v1::FreeBufferRequest free_held;
  free_held.set_buffer_id(held);
  v1::FreeBufferResponse freed;
  ASSERT_TRUE(session_->FreeBuffer(free_held, &freed).ok());
  EXPECT_EQ(tenant_->memory_bytes(), with_held - 16);  // Only the write's.
  destroy.set_graph_id(third);
  ASSERT_TRUE(session_->DestroyGraph(destroy, &destroyed).ok());
  EXPECT_EQ(tenant_->memory_bytes(), with_held - 16 - 32);

  // Teardown ends an open capture and gives back every charge.
  ASSERT_TRUE(begin().ok());
  ASSERT_TRUE(session_->WriteBuffer(write, &written).ok());
  session_->Teardown(absl::CancelledError("test teardown"));
  EXPECT_EQ(tenant_->graphs(), 0u);
  EXPECT_EQ(tenant_->memory_bytes(), 0u);
}

}  // namespace
}  // namespace gpustream::session
