// Starting gpustreamd on a backend under test, and skipping where it is absent.
#include "tests/backend_daemon.h"

#include <cstdlib>
#include <map>

#include "absl/base/const_init.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "tests/conformance/backend_under_test.h"

namespace gpustream::testing {
namespace {

ABSL_CONST_INIT absl::Mutex availability_mu(absl::kConstInit);

// The backend (in the shared context) that `backend` runs on.
std::string BaseBackend(const std::string& backend) {
  return backend == kCudaFakeNoWaitValue ? "cuda_fake"
                                         : conformance::BaseBackend(backend);
}

}  // namespace

bool IsCuda(const std::string& backend) {
  return BaseBackend(backend) == "cuda" || BaseBackend(backend) == "cuda_fake";
}

bool IsHip(const std::string& backend) {
  return BaseBackend(backend) == "hip" || BaseBackend(backend) == "hip_fake";
}

absl::Status BackendAvailable(const std::string& backend) {
  static auto* known = new std::map<std::string, absl::Status>();
  const std::string base = BaseBackend(backend);
  absl::MutexLock lock(&availability_mu);
  auto it = known->find(base);
  if (it == known->end()) {
    it = known->emplace(base, conformance::AbsentReason(base)).first;
  }
  return it->second;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> StartDaemonOn(
    const std::string& backend, const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = conformance::DaemonFlagsFor(
      backend == kCudaFakeNoWaitValue ? "cuda_fake" : backend);
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  if (backend != kCudaFakeNoWaitValue) return DaemonProcess::Start(args);
  // The daemon inherits this process's environment when it is spawned.
  setenv("FAKEGPU_NO_WAIT_VALUE", "1", /*overwrite=*/1);
  auto daemon = DaemonProcess::Start(args);
  unsetenv("FAKEGPU_NO_WAIT_VALUE");
  return daemon;
}

bool PollUntil(absl::Duration timeout, absl::FunctionRef<bool()> attempt,
               absl::Duration period) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (attempt()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(period);
  }
}

std::string BackendName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

void BackendDaemonTest::SetUp() {
  if (absl::Status available = BackendAvailable(backend()); !available.ok()) {
    GTEST_SKIP() << backend() << " is unavailable here: " << available;
  }
  auto daemon = StartDaemonOn(backend(), DaemonArgs());
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  daemon_ = *std::move(daemon);
}

}  // namespace gpustream::testing
