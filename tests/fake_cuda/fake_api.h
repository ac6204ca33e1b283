// The CUDA driver entry points that libfakecuda.so serves through
// cuGetProcAddress, and the internal functions that implement them.
//
// FAKECUDA_ENTRY_POINTS(X) calls X(name, since) for each entry point:
// `name` is the base name that cuGetProcAddress is asked for; cuda.h may
// #define it to a versioned symbol (cuMemAlloc -> cuMemAlloc_v2), and that
// symbol's type is the ABI the fake serves for the name, and the versioned
// name is accepted too. `since` is the lowest cudaVersion that gets it
// (the fake serves the ABI of CUDA 12.0 and later only). A base name whose
// ABI changed without a cuda.h #define is listed under its new symbol too,
// with an alias in fake_driver.cc (cuCtxSynchronize_v2).
// fakecuda::Fake_<name> implements it, declared below with exactly the type
// cuda.h gives `name`, so a signature mismatch does not link.
#ifndef TESTS_FAKE_CUDA_FAKE_API_H_
#define TESTS_FAKE_CUDA_FAKE_API_H_

#include <cuda.h>

#define FAKECUDA_ENTRY_POINTS(X)                        \
  X(cuGetProcAddress, 12000)                            \
  X(cuInit, 12000)                                      \
  X(cuDriverGetVersion, 12000)                          \
  X(cuGetErrorName, 12000)                              \
  X(cuGetErrorString, 12000)                            \
  X(cuDeviceGetCount, 12000)                            \
  X(cuDeviceGet, 12000)                                 \
  X(cuDeviceGetName, 12000)                             \
  X(cuDeviceTotalMem, 12000)                            \
  X(cuDeviceGetAttribute, 12000)                        \
  X(cuDevicePrimaryCtxRetain, 12000)                    \
  X(cuDevicePrimaryCtxRelease, 12000)                   \
  X(cuDevicePrimaryCtxReset, 12000)                     \
  X(cuCtxSetCurrent, 12000)                             \
  X(cuCtxGetCurrent, 12000)                             \
  X(cuCtxSynchronize, 12000)                            \
  X(cuCtxSynchronize_v2, 13000)                         \
  X(cuCtxGetStreamPriorityRange, 12000)                 \
  X(cuStreamCreateWithPriority, 12000)                  \
  X(cuStreamDestroy, 12000)                             \
  X(cuStreamQuery, 12000)                               \
  X(cuStreamSynchronize, 12000)                         \
  X(cuStreamWaitEvent, 12000)                           \
  X(cuStreamWaitValue64, 12000)                         \
  X(cuStreamWriteValue64, 12000)                        \
  X(cuLaunchHostFunc, 12000)                            \
  X(cuLaunchKernel, 12000)                              \
  X(cuLaunchKernelEx, 12000)                            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 12000) \
  X(cuOccupancyMaxPotentialClusterSize, 12000)          \
  X(cuEventCreate, 12000)                               \
  X(cuEventDestroy, 12000)                              \
  X(cuEventRecord, 12000)                               \
  X(cuEventQuery, 12000)                                \
  X(cuEventSynchronize, 12000)                          \
  X(cuEventElapsedTime, 12000)                          \
  X(cuMemAlloc, 12000)                                  \
  X(cuMemFree, 12000)                                   \
  X(cuMemAllocAsync, 12000)                             \
  X(cuMemFreeAsync, 12000)                              \
  X(cuMemHostAlloc, 12000)                              \
  X(cuMemFreeHost, 12000)                               \
  X(cuMemHostGetDevicePointer, 12000)                   \
  X(cuMemHostRegister, 12000)                           \
  X(cuMemHostUnregister, 12000)                         \
  X(cuMemGetInfo, 12000)                                \
  X(cuMemcpyHtoDAsync, 12000)                           \
  X(cuMemcpyDtoHAsync, 12000)                           \
  X(cuMemcpyDtoDAsync, 12000)                           \
  X(cuMemsetD32Async, 12000)                            \
  X(cuModuleLoadData, 12000)                            \
  X(cuModuleUnload, 12000)                              \
  X(cuModuleGetFunction, 12000)                         \
  X(cuFuncGetParamInfo, 12040)                          \
  X(cuFuncGetAttribute, 12000)                          \
  X(cuFuncSetAttribute, 12000)                          \
  X(cuCtxCreate, 12050)                                 \
  X(cuCtxDestroy, 12000)                                \
  X(cuCtxPopCurrent, 12000)                             \
  X(cuDeviceGetDevResource, 12040)                      \
  X(cuDevSmResourceSplitByCount, 12040)                 \
  X(cuDevResourceGenerateDesc, 12040)                   \
  X(cuGreenCtxCreate, 12040)                            \
  X(cuGreenCtxDestroy, 12040)                           \
  X(cuGreenCtxStreamCreate, 12040)                      \
  X(cuStreamBeginCapture, 12000)                        \
  X(cuStreamEndCapture, 12000)                          \
  X(cuStreamIsCapturing, 12000)                         \
  X(cuGraphInstantiate, 12000)                          \
  X(cuGraphDestroy, 12000)                              \
  X(cuGraphExecDestroy, 12000)                          \
  X(cuGraphLaunch, 12000)

namespace fakecuda {

// Declares e.g. `CUresult Fake_cuMemAlloc(CUdeviceptr*, size_t);` as the
// type of cuda.h's cuMemAlloc (that is, cuMemAlloc_v2).
#define FAKECUDA_DECLARE(name, since) decltype(name) Fake_##name;
FAKECUDA_ENTRY_POINTS(FAKECUDA_DECLARE)
#undef FAKECUDA_DECLARE

}  // namespace fakecuda

#endif  // TESTS_FAKE_CUDA_FAKE_API_H_
