// Device 0 of the fake CUDA driver (//tests/fake_cuda:libfakecuda.so), opened
// as gpustreamd opens a real one, for the CUDA backend's own tests. Tests
// that fault the device keep a process of their own: by default the fake,
// like a driver, keeps a sticky error through a reset for the process's
// life.
#ifndef GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_FAKE_TESTING_H_
#define GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_FAKE_TESTING_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/backend/cuda/cuda_backend.h"
#include "server/backend/gpu/gpu_device.h"

namespace gpustream::backend {

// The fake driver's path in the test's runfiles.
inline std::string FakeCudaDriverPath() {
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root != nullptr ? root : ".") +
         "/gpustream/tests/fake_cuda/libfakecuda.so";
}

// Loads the fake driver, runs cuInit and opens device 0.
inline absl::StatusOr<std::unique_ptr<GpuDevice>> OpenFakeCudaDevice() {
  auto driver = OpenCudaDriver(FakeCudaDriverPath());
  if (!driver.ok()) return driver.status();
  return OpenCudaDevice(*std::move(driver), 0);
}

// The first 8 bytes of `buffer` as `queue` reads them, after the work
// enqueued on it before: the read's error, or DEADLINE_EXCEEDED when it
// has not completed within `timeout`.
inline absl::StatusOr<uint64_t> ReadU64(
    Queue& queue, std::shared_ptr<Buffer> buffer,
    absl::Duration timeout = absl::Seconds(10)) {
  struct Result {
    absl::Notification done;
    absl::StatusOr<std::string> data;
  };
  auto result = std::make_shared<Result>();
  if (absl::Status s = queue.Read(std::move(buffer), 0, 8,
                                  [result](absl::StatusOr<std::string> data) {
                                    result->data = std::move(data);
                                    result->done.Notify();
                                  });
      !s.ok()) {
    return s;
  }
  if (!result->done.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError("the read did not complete");
  }
  if (!result->data.ok()) return result->data.status();
  if (result->data->size() != 8) {
    return absl::InternalError(
        absl::StrCat("read ", result->data->size(), " bytes, not 8"));
  }
  uint64_t value = 0;
  std::memcpy(&value, result->data->data(), 8);
  return value;
}

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_FAKE_TESTING_H_
