// Which backends the cross-backend suites run on, and how to open each.
#ifndef GPUSTREAM_TESTS_CONFORMANCE_BACKEND_UNDER_TEST_H_
#define GPUSTREAM_TESTS_CONFORMANCE_BACKEND_UNDER_TEST_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/backend/device.h"

namespace gpustream::conformance {

// "cpu"; "cuda_fake": the CUDA backend on //tests/fake_cuda's driver;
// "cuda": the CUDA backend on the machine's real driver (libcuda.so.1);
// "hip_fake": the HIP backend on //tests/fake_hip's runtime; "hip": the HIP
// backend on the machine's real runtime (libamdhip64).
std::vector<std::string> BackendsUnderTest();

// The path of libfakecuda.so in the test's runfiles ("" in a build without
// CUDA support).
std::string FakeCudaDriverPath();
// The path of libfakehip.so likewise (built everywhere).
std::string FakeHipRuntimePath();

// The daemon flags that select `backend` ({"--backend=cpu"}, ...).
std::vector<std::string> DaemonFlagsFor(const std::string& backend);

// Why `backend` is absent here, for GTEST_SKIP(); OK where its cases must
// run. Absent means only: the CUDA backend or its fake in a build without
// CUDA support (the HIP fake is never absent), (real "cuda") no
// libcuda.so.1 that the dynamic loader finds, as a user's process would
// look for it, or (real "hip") no libamdhip64 it finds, or one that finds
// no device (Debian installs the runtime with its headers). Anything else that
// keeps a present backend from opening is a failure of the case, never a skip:
// a green run must prove that every backend present ran.
absl::Status AbsentReason(const std::string& backend);

// Device 0 of `backend` (present: AbsentReason is OK); an error is a test
// failure.
absl::StatusOr<std::unique_ptr<backend::Device>> OpenBackend(
    const std::string& backend);

}  // namespace gpustream::conformance

#endif  // GPUSTREAM_TESTS_CONFORMANCE_BACKEND_UNDER_TEST_H_
