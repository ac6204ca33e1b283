// The CUDA driver API, resolved at run time: dlopen of libcuda.so.1 (or the
// --cuda_driver path) and every entry point through cuGetProcAddress_v2.
#ifndef GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_DRIVER_H_
#define GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_DRIVER_H_

#include <cuda.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace gpustream::backend {

// The entry points the backend uses, each with the signature cuda.h gives
// its name (cuda.h maps names to their current ABI: cuMemAlloc is
// cuMemAlloc_v2). Immutable after Load; the library stays loaded for the
// process's lifetime (driver threads may still run its code at exit).
struct CudaDriver {
  // clang-format off
#define GPUSTREAM_CUDA_ENTRY_POINTS(X) \
  X(cuInit) \
  X(cuDriverGetVersion) \
  X(cuGetErrorName) \
  X(cuGetErrorString) \
  X(cuDeviceGetCount) \
  X(cuDeviceGet) \
  X(cuDeviceGetName) \
  X(cuDeviceTotalMem) \
  X(cuDeviceGetAttribute) \
  X(cuDevicePrimaryCtxRetain) \
  X(cuDevicePrimaryCtxRelease) \
  X(cuDevicePrimaryCtxReset) \
  X(cuCtxSetCurrent) \
  X(cuCtxGetStreamPriorityRange) \
  X(cuStreamCreateWithPriority) \
  X(cuStreamDestroy) \
  X(cuStreamQuery) \
  X(cuStreamSynchronize) \
  X(cuStreamWaitEvent) \
  X(cuStreamWaitValue64) \
  X(cuStreamWriteValue64) \
  X(cuLaunchHostFunc) \
  X(cuLaunchKernel) \
  X(cuLaunchKernelEx) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuOccupancyMaxPotentialClusterSize) \
  X(cuEventCreate) \
  X(cuEventDestroy) \
  X(cuEventRecord) \
  X(cuEventQuery) \
  X(cuEventElapsedTime) \
  X(cuMemAlloc) \
  X(cuMemFree) \
  X(cuMemAllocAsync) \
  X(cuMemFreeAsync) \
  X(cuMemHostAlloc) \
  X(cuMemFreeHost) \
  X(cuMemHostGetDevicePointer) \
  X(cuMemHostRegister) \
  X(cuMemHostUnregister) \
  X(cuMemGetInfo) \
  X(cuMemcpyHtoDAsync) \
  X(cuMemcpyDtoHAsync) \
  X(cuMemcpyDtoDAsync) \
  X(cuMemsetD32Async) \
  X(cuModuleLoadData) \
  X(cuModuleUnload) \
  X(cuModuleGetFunction) \
  X(cuFuncGetParamInfo) \
  X(cuFuncGetAttribute) \
  X(cuFuncSetAttribute) \
  X(cuCtxCreate) \
  X(cuCtxDestroy) \
  X(cuCtxPopCurrent) \
  X(cuDeviceGetDevResource) \
  X(cuDevSmResourceSplitByCount) \
  X(cuDevResourceGenerateDesc) \
  X(cuGreenCtxCreate) \
  X(cuGreenCtxDestroy) \
  X(cuGreenCtxStreamCreate) \
  X(cuStreamBeginCapture) \
  X(cuStreamEndCapture) \
  X(cuGraphInstantiateWithFlags) \
  X(cuGraphDestroy) \
  X(cuGraphExecDestroy) \
  X(cuGraphLaunch)
  // clang-format on
#define GPUSTREAM_CUDA_DECLARE(name) decltype(&::name) name = nullptr;
  GPUSTREAM_CUDA_ENTRY_POINTS(GPUSTREAM_CUDA_DECLARE)
#undef GPUSTREAM_CUDA_DECLARE

  // Loads `path` (a file name such as "libcuda.so.1", searched as dlopen
  // does, or a path), checks the driver's version and resolves every entry
  // point with the ABI of the headers (CUDA_VERSION). UNAVAILABLE naming
  // the library when it cannot be loaded; FAILED_PRECONDITION naming both
  // versions when the driver is older than the headers; UNIMPLEMENTED
  // naming the entry point a driver lacks. Does not call cuInit.
  static absl::StatusOr<std::unique_ptr<CudaDriver>> Load(
      const std::string& path);

  std::string path;
  int version = 0;  // cuDriverGetVersion: 13000 is CUDA 13.0.
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CUDA_CUDA_DRIVER_H_
