// The cross-backend conformance suite's fixture: every backend present runs
// the same cases (cpu; cuda on the fake driver; cuda on a real driver where
// one exists), as StreamExecutor runs one stream suite on CUDA and ROCm.
// Parameterized by backend; a backend that is absent is skipped with the
// reason. The cases live in *_cases.cc, one file per subject.
#ifndef GPUSTREAM_TESTS_CONFORMANCE_DEVICE_CONFORMANCE_H_
#define GPUSTREAM_TESTS_CONFORMANCE_DEVICE_CONFORMANCE_H_

#include <csignal>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/backend/device.h"
#include "tests/conformance/backend_under_test.h"

namespace gpustream::backend {

constexpr absl::Duration kLong = absl::Seconds(20);

class DeviceConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (absl::Status absent = conformance::AbsentReason(GetParam());
        !absent.ok()) {
      GTEST_SKIP() << absent;
    }
    auto device = conformance::OpenBackend(GetParam());
    ASSERT_TRUE(device.ok())
        << GetParam() << " is present but does not open: " << device.status();
    device_ = *std::move(device);
    device_->SetFatalErrorHandler([this](const DeviceFailure& failure) {
      fatal_status_ = failure.cause;
      fatal_sessions_ = failure.sessions_with_kernels;
      fatal_.Notify();
    });
    modules_ = device_->BuiltinModules();
    ASSERT_FALSE(modules_.empty());
    for (auto& m : modules_) {
      if (m->info().name == "samples") samples_ = m.get();
    }
    ASSERT_NE(samples_, nullptr);
  }

  bool IsCpu() const { return GetParam() == "cpu"; }

  // Where a kernel fault takes the whole process down (faults_recoverable
  // false: ROCm 5.x's runtime aborts), proves that `fault` does, in a child
  // (a death test), and returns true: the case has nothing more to check.
  // False where faults are recoverable: the caller goes on.
  template <typename F>
  bool FaultKillsTheProcess(F fault) {
    if (device_->info().faults_recoverable) return false;
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(fault(), ::testing::KilledBySignal(SIGABRT), "");
    return true;
  }

  const Kernel& K(const char* name) { return **samples_->FindKernel(name); }

  std::shared_ptr<Queue> NewQueue(uint64_t session_key = 0) {
    QueueOptions options;
    options.session_key = session_key;
    return *device_->CreateQueue(std::move(options));
  }
  std::shared_ptr<Buffer> Alloc(uint64_t size) {
    return *device_->Allocate(size, MemoryKind::kDevice);
  }

  // Waits for the queue to be idle; the sticky status.
  absl::Status Sync(Queue& q, absl::Duration limit = kLong) {
    auto n = std::make_shared<absl::Notification>();
    auto status = std::make_shared<absl::Status>();
    q.OnIdle([n, status](absl::Status s) {
      *status = s;
      n->Notify();
    });
    if (!n->WaitForNotificationWithTimeout(limit)) {
      return absl::DeadlineExceededError("queue did not drain");
    }
    return *status;
  }

  // Reads `size` bytes (the error text if the read fails).
  std::string ReadBack(Queue& q, std::shared_ptr<Buffer> b, uint64_t offset,
                       uint64_t size) {
    auto n = std::make_shared<absl::Notification>();
    auto out = std::make_shared<std::string>();
    absl::Status s =
        q.Read(b, offset, size, [n, out](absl::StatusOr<std::string> data) {
          *out = data.ok() ? *data : "error:" + data.status().ToString();
          n->Notify();
        });
    if (!s.ok()) return "error:" + s.ToString();
    if (!n->WaitForNotificationWithTimeout(kLong)) return "error:timeout";
    return *out;
  }

  uint64_t ReadU64(Queue& q, std::shared_ptr<Buffer> b) {
    std::string bytes = ReadBack(q, b, 0, 8);
    EXPECT_EQ(bytes.size(), 8u) << bytes;
    uint64_t v = 0;
    if (bytes.size() == 8) std::memcpy(&v, bytes.data(), 8);
    return v;
  }

  // Polls until `q` is idle or `limit` passes.
  static bool EventuallyIdle(Queue& q, absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    while (absl::Now() < deadline) {
      if (q.IsIdle()) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return q.IsIdle();
  }

  std::unique_ptr<Device> device_;
  std::vector<std::unique_ptr<Module>> modules_;
  Module* samples_ = nullptr;
  absl::Notification fatal_;
  absl::Status fatal_status_;
  std::vector<uint64_t> fatal_sessions_;  // DeviceFailure's.
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_TESTS_CONFORMANCE_DEVICE_CONFORMANCE_H_
