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

// BackendsUnderTest(), then the CUDA backend (fake and real) in the other
// gpu_sharing modes, for the suites that every mode must pass (conformance,
// tenancy): "<cuda backend>_context_per_tenant" (a tenant's own context,
// as Device::CreateContext makes it) and "<cuda backend>_sm_partitions"
// (every queue on an SM partition of two-thirds of the device, as
// Device::PartitionSms({2, 1}) makes it). The other names of this file
// take these too. Under the sanitizers, BackendsUnderTest() alone: a mode
// changes which contexts and SM partitions the daemon makes, which the
// default build proves in every mode (and gpu_sharing_test under the
// sanitizers too), not the paths ASan and TSan watch; leaving them out
// keeps the test command within its time on two cores.
std::vector<std::string> BackendsAndSharingModesUnderTest();

// The backend a name of BackendsUnderTest() runs ("cuda_fake" for
// "cuda_fake_sm_partitions"), and its gpu_sharing mode's flag value
// ("shared_context", "context_per_tenant", "sm_partitions").
std::string BaseBackend(const std::string& backend);
std::string SharingOf(const std::string& backend);

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
