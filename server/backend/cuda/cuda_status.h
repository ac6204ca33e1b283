// CUresult → absl::Status: the one mapping of driver errors.
#ifndef GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_STATUS_H_
#define GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_STATUS_H_

#include <cuda.h>

#include "absl/status/status.h"
#include "server/backend/cuda/cuda_driver.h"

namespace gpustream::backend {

// Whether `r` leaves the context unusable (a kernel fault, a lost device):
// the device must be reset, and every session on it ends with ABORTED.
bool IsFatal(CUresult r);

// Slow path of ToStatus: out of memory → RESOURCE_EXHAUSTED; fatal errors →
// ABORTED; unsupported → UNIMPLEMENTED; bad values → INVALID_ARGUMENT;
// anything else INTERNAL. The message names `call` and the driver's name
// and text for the code (when `driver` is set).
absl::Status CudaError(CUresult r, const char* call, const CudaDriver* driver);

inline absl::Status ToStatus(CUresult r, const char* call,
                             const CudaDriver* driver) {
  if (r == CUDA_SUCCESS) [[likely]] {
    return absl::OkStatus();
  }
  return CudaError(r, call, driver);
}

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_STATUS_H_
