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
// "cuda": the CUDA backend on the machine's real driver (libcuda.so.1).
std::vector<std::string> BackendsUnderTest();

// The path of libfakecuda.so in the test's runfiles ("" in a build without
// CUDA support).
std::string FakeCudaDriverPath();

// The daemon flags that select `backend` ({"--backend=cpu"}, ...).
std::vector<std::string> DaemonFlagsFor(const std::string& backend);

// Device 0 of `backend`; an error says why it is unavailable here (no CUDA
// support in this build, no driver, no GPU): the caller skips with it.
absl::StatusOr<std::unique_ptr<backend::Device>> OpenBackend(
    const std::string& backend);

}  // namespace gpustream::conformance

#endif  // GPUSTREAM_TESTS_CONFORMANCE_BACKEND_UNDER_TEST_H_
