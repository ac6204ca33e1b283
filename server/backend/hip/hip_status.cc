// The hipError_t mapping.
#include "server/backend/hip/hip_status.h"

#include "absl/strings/str_cat.h"

namespace gpustream::backend {

bool IsFatal(hipapi::Error e) {
  switch (e) {
    case hipapi::kErrorIllegalAddress:
    case hipapi::kErrorLaunchFailure:
    case hipapi::kErrorLaunchTimeOut:
    case hipapi::kErrorAssert:
    case hipapi::kErrorECCNotCorrectable:
      return true;
    // Not hipErrorContextIsDestroyed or hipErrorUnknown: ROCm returns them
    // for a bad handle and as a catch-all, not for a lost context, and a
    // fatal code fails every session on the device.
    default:
      return false;
  }
}

absl::Status HipError(hipapi::Error e, const char* call,
                      const HipDriver* driver) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver != nullptr && driver->hipGetErrorName != nullptr) {
    name = driver->hipGetErrorName(e);
    text = driver->hipGetErrorString(e);
  }
  const std::string message =
      absl::StrCat(call, ": ", name != nullptr ? name : "HIP error", " (",
                   static_cast<int>(e), ")",
                   text != nullptr ? absl::StrCat(": ", text) : "");
  if (IsFatal(e)) return absl::AbortedError(message);
  switch (e) {
    case hipapi::kErrorOutOfMemory:
      return absl::ResourceExhaustedError(message);
    case hipapi::kErrorNotSupported:
      return absl::UnimplementedError(message);
    case hipapi::kErrorInvalidValue:
    case hipapi::kErrorInvalidImage:
    case hipapi::kErrorInvalidKernelFile:
    case hipapi::kErrorNoBinaryForGpu:
    case hipapi::kErrorLaunchOutOfResources:
      return absl::InvalidArgumentError(message);
    case hipapi::kErrorNotFound:
      return absl::NotFoundError(message);
    case hipapi::kErrorNoDevice:
    case hipapi::kErrorNotInitialized:
    case hipapi::kErrorDeinitialized:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace gpustream::backend
