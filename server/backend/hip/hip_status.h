// hipError_t → absl::Status: the one mapping of HIP runtime errors.
#ifndef GPUSTREAM_SERVER_BACKEND_HIP_HIP_STATUS_H_
#define GPUSTREAM_SERVER_BACKEND_HIP_HIP_STATUS_H_

#include "absl/status/status.h"
#include "server/backend/hip/hip_api.h"
#include "server/backend/hip/hip_driver.h"

namespace gpustream::backend {

// Whether `e` leaves the device's context unusable (a kernel fault, ECC):
// the device fails, and every session on it ends with ABORTED. (ROCm 5.2 aborts
// the process on a queue error before a caller hears of it; later runtimes
// report these.)
bool IsFatal(hipapi::Error e);

// Slow path of ToStatus: out of memory → RESOURCE_EXHAUSTED; fatal errors →
// ABORTED; unsupported → UNIMPLEMENTED; bad values and images →
// INVALID_ARGUMENT; anything else INTERNAL. The message names `call` and
// the runtime's name and text for the code (when `driver` is set).
absl::Status HipError(hipapi::Error e, const char* call,
                      const HipDriver* driver);

inline absl::Status ToStatus(hipapi::Error e, const char* call,
                             const HipDriver* driver) {
  if (e == hipapi::kSuccess) [[likely]] {
    return absl::OkStatus();
  }
  return HipError(e, call, driver);
}

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_HIP_HIP_STATUS_H_
