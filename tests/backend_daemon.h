// A gpustreamd process on one backend under test, for the end-to-end suites
// that run on every backend (cpu, cuda on the fake driver, cuda on a GPU).
#ifndef GPUSTREAM_TESTS_BACKEND_DAEMON_H_
#define GPUSTREAM_TESTS_BACKEND_DAEMON_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace gpustream::testing {

// Not a backend of conformance::BackendsUnderTest() but a way to run one:
// cuda_fake with FAKEGPU_NO_WAIT_VALUE=1 in the daemon's environment, a
// device without 64-bit stream memory operations, so that the daemon itself
// holds a queue's work behind a flag wait (wait_value_mode "daemon").
inline constexpr char kCudaFakeNoWaitValue[] = "cuda_fake_no_wait_value";

// Whether `backend` drives a CUDA device (the fake driver or a real one),
// an AMD one through HIP (the fake runtime or a real one), or either.
bool IsCuda(const std::string& backend);
bool IsHip(const std::string& backend);
inline bool IsGpu(const std::string& backend) {
  return IsCuda(backend) || IsHip(backend);
}

// OK where `backend` (a name of BackendsUnderTest() or kCudaFakeNoWaitValue)
// must run here; else why it is absent (conformance::AbsentReason: no CUDA
// support in this build, no CUDA driver library), for GTEST_SKIP(). A
// present backend that fails to start fails its case. Thread-safe.
absl::Status BackendAvailable(const std::string& backend);

// Starts gpustreamd on `backend` (its DaemonFlagsFor() flags, then
// `extra_args`). For kCudaFakeNoWaitValue, FAKEGPU_NO_WAIT_VALUE=1 is in
// the daemon's environment only (set around the spawn).
absl::StatusOr<std::unique_ptr<DaemonProcess>> StartDaemonOn(
    const std::string& backend,
    const std::vector<std::string>& extra_args = {});

// Calls `attempt` every `period` until it returns true or `timeout` has
// passed; whether it did. For outcomes the daemon reaches asynchronously.
bool PollUntil(absl::Duration timeout, absl::FunctionRef<bool()> attempt,
               absl::Duration period = absl::Milliseconds(20));

// The test name suffix of a backend parameter: the backend's name.
std::string BackendName(const ::testing::TestParamInfo<std::string>& info);

// A test parameterized by the backend: SetUp skips (with the reason) where
// the backend is unavailable, else starts `daemon_` on it with DaemonArgs().
// Fixtures that add to SetUp call this one first and return if
// IsSkipped() or HasFatalFailure().
class BackendDaemonTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override;
  // Daemon flags after the backend's own.
  virtual std::vector<std::string> DaemonArgs() const { return {}; }

  const std::string& backend() const { return GetParam(); }
  bool on_cpu() const { return GetParam() == "cpu"; }
  bool on_cuda() const { return IsCuda(GetParam()); }
  bool on_hip() const { return IsHip(GetParam()); }
  bool on_gpu() const { return IsGpu(GetParam()); }

  std::unique_ptr<DaemonProcess> daemon_;
};

}  // namespace gpustream::testing

#endif  // GPUSTREAM_TESTS_BACKEND_DAEMON_H_
