// Pins the CUresult → status mapping for every code the backend can see.
#include "server/backend/cuda/cuda_status.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gpustream::backend {
namespace {

TEST(CudaStatusTest, SuccessIsOk) {
  EXPECT_TRUE(ToStatus(CUDA_SUCCESS, "cuInit", nullptr).ok());
}

TEST(CudaStatusTest, EveryCodeMapsAsDocumented) {
  using C = absl::StatusCode;
  const std::vector<std::pair<CUresult, C>> table = {
      {CUDA_ERROR_OUT_OF_MEMORY, C::kResourceExhausted},
      {CUDA_ERROR_NOT_SUPPORTED, C::kUnimplemented},
      {CUDA_ERROR_INVALID_VALUE, C::kInvalidArgument},
      {CUDA_ERROR_INVALID_IMAGE, C::kInvalidArgument},
      {CUDA_ERROR_INVALID_PTX, C::kInvalidArgument},
      {CUDA_ERROR_NO_BINARY_FOR_GPU, C::kInvalidArgument},
      {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, C::kInvalidArgument},
      {CUDA_ERROR_INVALID_CLUSTER_SIZE, C::kInvalidArgument},
      {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, C::kOutOfRange},
      {CUDA_ERROR_NOT_FOUND, C::kNotFound},
      {CUDA_ERROR_NO_DEVICE, C::kUnavailable},
      {CUDA_ERROR_NOT_INITIALIZED, C::kUnavailable},
      {CUDA_ERROR_DEINITIALIZED, C::kUnavailable},
      {CUDA_ERROR_ILLEGAL_ADDRESS, C::kAborted},
      {CUDA_ERROR_LAUNCH_FAILED, C::kAborted},
      {CUDA_ERROR_LAUNCH_TIMEOUT, C::kAborted},
      {CUDA_ERROR_ILLEGAL_INSTRUCTION, C::kAborted},
      {CUDA_ERROR_MISALIGNED_ADDRESS, C::kAborted},
      {CUDA_ERROR_INVALID_ADDRESS_SPACE, C::kAborted},
      {CUDA_ERROR_INVALID_PC, C::kAborted},
      {CUDA_ERROR_HARDWARE_STACK_ERROR, C::kAborted},
      {CUDA_ERROR_ASSERT, C::kAborted},
      {CUDA_ERROR_ECC_UNCORRECTABLE, C::kAborted},
      {CUDA_ERROR_NVLINK_UNCORRECTABLE, C::kAborted},
      {CUDA_ERROR_CONTEXT_IS_DESTROYED, C::kAborted},
      {CUDA_ERROR_DEVICE_UNAVAILABLE, C::kAborted},
      {CUDA_ERROR_UNKNOWN, C::kAborted},
      {CUDA_ERROR_CONTAINED, C::kAborted},
      {CUDA_ERROR_TENSOR_MEMORY_LEAK, C::kAborted},
      {CUDA_ERROR_MPS_CLIENT_TERMINATED, C::kAborted},
      {CUDA_ERROR_EXTERNAL_DEVICE, C::kAborted},
      {CUDA_ERROR_INVALID_CONTEXT, C::kInternal},
      {CUDA_ERROR_INVALID_HANDLE, C::kInternal},
      {CUDA_ERROR_NOT_READY, C::kInternal},
      {CUDA_ERROR_INVALID_DEVICE, C::kInternal},
  };
  for (const auto& [code, want] : table) {
    absl::Status s = ToStatus(code, "cuSomething", nullptr);
    EXPECT_EQ(s.code(), want) << code << ": " << s;
    EXPECT_NE(s.message().find("cuSomething"), std::string::npos) << s;
    EXPECT_NE(s.message().find(std::to_string(static_cast<int>(code))),
              std::string::npos)
        << s;
    EXPECT_EQ(IsFatal(code), want == C::kAborted) << code;
  }
}

}  // namespace
}  // namespace gpustream::backend
