// The CUresult mapping.
#include "server/backend/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace gpustream::backend {

// Every code cuda.h says leaves the process (or the context) unusable:
// "any further CUDA work will return the same error. To continue using
// CUDA, the process must be terminated and relaunched."
bool IsFatal(CUresult r) {
  switch (r) {
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_MPS_CLIENT_TERMINATED:
    case CUDA_ERROR_EXTERNAL_DEVICE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_UNKNOWN:
      return true;
    default:
      return false;
  }
}

absl::Status CudaError(CUresult r, const char* call, const CudaDriver* driver) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver != nullptr && driver->cuGetErrorName != nullptr) {
    driver->cuGetErrorName(r, &name);
    driver->cuGetErrorString(r, &text);
  }
  const std::string message =
      absl::StrCat(call, ": ", name != nullptr ? name : "CUDA error", " (",
                   static_cast<int>(r), ")",
                   text != nullptr ? absl::StrCat(": ", text) : "");
  if (IsFatal(r)) return absl::AbortedError(message);
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    case CUDA_ERROR_NOT_SUPPORTED:
      return absl::UnimplementedError(message);
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    case CUDA_ERROR_INVALID_CLUSTER_SIZE:
      return absl::InvalidArgumentError(message);
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
      return absl::OutOfRangeError(message);
    case CUDA_ERROR_NOT_FOUND:
      return absl::NotFoundError(message);
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace gpustream::backend
