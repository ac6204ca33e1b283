// The fake HIP runtime (//tests/fake_hip:libfakehip.so) for the HIP
// backend's own tests.
#ifndef GPUSTREAM_SERVER_BACKEND_HIP_HIP_FAKE_TESTING_H_
#define GPUSTREAM_SERVER_BACKEND_HIP_HIP_FAKE_TESTING_H_

#include <cstdlib>
#include <string>

namespace gpustream::backend {

// The fake runtime's path in the test's runfiles.
inline std::string FakeHipRuntimePath() {
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root != nullptr ? root : ".") +
         "/gpustream/tests/fake_hip/libfakehip.so";
}

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_HIP_HIP_FAKE_TESTING_H_
