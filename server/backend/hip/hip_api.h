// The part of the HIP runtime API (hip_runtime_api.h of ROCm 5.2, the same
// ABI in ROCm 6) that the HIP backend calls, declared here so that the
// backend builds without HIP's headers. Where they are installed,
// hip_api_check.cc proves every declaration below against them.
#ifndef GPUSTREAM_SERVER_BACKEND_HIP_HIP_API_H_
#define GPUSTREAM_SERVER_BACKEND_HIP_HIP_API_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gpustream::backend::hipapi {

// hipError_t: the codes the backend tells apart.
enum Error : int {
  kSuccess = 0,
  kErrorInvalidValue = 1,
  kErrorOutOfMemory = 2,
  kErrorNotInitialized = 3,
  kErrorDeinitialized = 4,
  kErrorNoDevice = 100,
  kErrorInvalidDevice = 101,
  kErrorInvalidImage = 200,
  kErrorInvalidContext = 201,
  kErrorNoBinaryForGpu = 209,
  kErrorECCNotCorrectable = 214,
  kErrorInvalidKernelFile = 218,
  kErrorInvalidHandle = 400,
  kErrorIllegalState = 401,
  kErrorNotFound = 500,
  kErrorNotReady = 600,
  kErrorIllegalAddress = 700,
  kErrorLaunchOutOfResources = 701,
  kErrorLaunchTimeOut = 702,
  kErrorContextIsDestroyed = 709,
  kErrorAssert = 710,
  kErrorHostMemoryAlreadyRegistered = 712,
  kErrorHostMemoryNotRegistered = 713,
  kErrorLaunchFailure = 719,
  kErrorNotSupported = 801,
  kErrorStreamCaptureUnsupported = 900,
  kErrorStreamCaptureInvalidated = 901,
  kErrorStreamCaptureWrongThread = 908,
  kErrorUnknown = 999,
  kErrorRuntimeOther = 1053,
};

// Opaque handles (hipStream_t is `struct ihipStream_t*`, and so on).
struct Stream;
struct Event;
struct Context;
struct Module;
struct Function;
struct Graph;        // ihipGraph
struct GraphNode;    // hipGraphNode
struct GraphExec;    // hipGraphExec
using Device = int;  // hipDevice_t

// hipStreamCaptureMode.
enum StreamCaptureMode : int {
  kCaptureModeGlobal = 0,
  kCaptureModeThreadLocal = 1,
  kCaptureModeRelaxed = 2,
};

// hipDeviceAttribute_t values the backend reads.
enum DeviceAttribute : int {
  kAttrComputeCapabilityMajor = 23,
  kAttrMaxBlockDimX = 26,
  kAttrMaxBlockDimY = 27,
  kAttrMaxBlockDimZ = 28,
  kAttrMaxGridDimX = 29,
  kAttrMaxGridDimY = 30,
  kAttrMaxGridDimZ = 31,
  kAttrMaxThreadsPerBlock = 56,
  kAttrMultiprocessorCount = 63,
  kAttrMaxSharedMemoryPerBlock = 74,
  kAttrMemoryPoolsSupported = 88,
  kAttrCanUseStreamWaitValue = 10013,
};

// hipFunction_attribute values.
enum FunctionAttribute : int {
  kFuncMaxThreadsPerBlock = 0,
  kFuncSharedSizeBytes = 1,
  kFuncMaxDynamicSharedSizeBytes = 8,
};

// Flags.
constexpr unsigned kStreamNonBlocking = 1;   // hipStreamNonBlocking
constexpr unsigned kEventDisableTiming = 2;  // hipEventDisableTiming
constexpr unsigned kHostMallocPortable = 1;  // hipHostMallocPortable
constexpr unsigned kHostMallocMapped = 2;    // hipHostMallocMapped
constexpr unsigned kHostRegisterMapped = 2;  // hipHostRegisterMapped

// hipDeviceProp_t as hipGetDeviceProperties fills it (ROCm 5.x; ROCm 6
// keeps this layout under the same symbol): only gcnArchName is read.
struct DeviceProp {
  static constexpr size_t kSize = 792;
  static constexpr size_t kGcnArchNameOffset = 396;
  static constexpr size_t kGcnArchNameSize = 256;
  alignas(8) unsigned char bytes[kSize];
};

// Every entry point, with its type: X(name, return, (parameters)).
// clang-format off
#define GPUSTREAM_HIP_ENTRY_POINTS(X)                                        \
  X(hipInit, Error, (unsigned int flags))                                    \
  X(hipDriverGetVersion, Error, (int* version))                              \
  X(hipRuntimeGetVersion, Error, (int* version))                             \
  X(hipGetErrorName, const char*, (Error error))                             \
  X(hipGetErrorString, const char*, (Error error))                           \
  X(hipGetDeviceCount, Error, (int* count))                                  \
  X(hipDeviceGet, Error, (Device* device, int ordinal))                      \
  X(hipDeviceGetName, Error, (char* name, int len, Device device))           \
  X(hipDeviceTotalMem, Error, (size_t* bytes, Device device))                \
  X(hipDeviceGetAttribute, Error,                                            \
    (int* value, DeviceAttribute attribute, int device))                     \
  X(hipGetDeviceProperties, Error, (DeviceProp* prop, int device))           \
  X(hipDevicePrimaryCtxRetain, Error, (Context** context, Device device))    \
  X(hipDevicePrimaryCtxRelease, Error, (Device device))                      \
  X(hipDevicePrimaryCtxReset, Error, (Device device))                        \
  X(hipCtxSetCurrent, Error, (Context* context))                             \
  X(hipDeviceGetStreamPriorityRange, Error, (int* least, int* greatest))     \
  X(hipStreamCreateWithPriority, Error,                                      \
    (Stream** stream, unsigned int flags, int priority))                     \
  X(hipStreamDestroy, Error, (Stream* stream))                               \
  X(hipStreamQuery, Error, (Stream* stream))                                 \
  X(hipStreamSynchronize, Error, (Stream* stream))                           \
  X(hipStreamWaitEvent, Error,                                               \
    (Stream* stream, Event* event, unsigned int flags))                      \
  X(hipStreamWriteValue64, Error,                                            \
    (Stream* stream, void* ptr, uint64_t value, unsigned int flags))         \
  X(hipEventCreateWithFlags, Error, (Event** event, unsigned flags))         \
  X(hipEventDestroy, Error, (Event* event))                                  \
  X(hipEventRecord, Error, (Event* event, Stream* stream))                   \
  X(hipEventQuery, Error, (Event* event))                                    \
  X(hipEventElapsedTime, Error, (float* ms, Event* start, Event* stop))      \
  X(hipMalloc, Error, (void** ptr, size_t size))                             \
  X(hipFree, Error, (void* ptr))                                             \
  X(hipMallocAsync, Error, (void** ptr, size_t size, Stream* stream))        \
  X(hipFreeAsync, Error, (void* ptr, Stream* stream))                        \
  X(hipHostMalloc, Error, (void** ptr, size_t size, unsigned int flags))     \
  X(hipHostFree, Error, (void* ptr))                                         \
  X(hipHostRegister, Error,                                                  \
    (void* host_ptr, size_t size, unsigned int flags))                       \
  X(hipHostUnregister, Error, (void* host_ptr))                              \
  X(hipHostGetDevicePointer, Error,                                          \
    (void** device_ptr, void* host_ptr, unsigned int flags))                 \
  X(hipMemGetInfo, Error, (size_t* free, size_t* total))                     \
  X(hipMemcpyHtoDAsync, Error,                                               \
    (void* dst, void* src, size_t bytes, Stream* stream))                    \
  X(hipMemcpyDtoHAsync, Error,                                               \
    (void* dst, void* src, size_t bytes, Stream* stream))                    \
  X(hipMemcpyDtoDAsync, Error,                                               \
    (void* dst, void* src, size_t bytes, Stream* stream))                    \
  X(hipMemsetD32Async, Error,                                                \
    (void* dst, int value, size_t count, Stream* stream))                    \
  X(hipModuleLoadData, Error, (Module** module, const void* image))          \
  X(hipModuleUnload, Error, (Module* module))                                \
  X(hipModuleGetFunction, Error,                                             \
    (Function** function, Module* module, const char* name))                 \
  X(hipFuncGetAttribute, Error,                                              \
    (int* value, FunctionAttribute attribute, Function* function))           \
  X(hipModuleLaunchKernel, Error,                                            \
    (Function* function, unsigned int grid_x, unsigned int grid_y,           \
     unsigned int grid_z, unsigned int block_x, unsigned int block_y,        \
     unsigned int block_z, unsigned int shared_bytes, Stream* stream,        \
     void** params, void** extra))                                           \
  X(hipStreamBeginCapture, Error, (Stream* stream, StreamCaptureMode mode))  \
  X(hipStreamEndCapture, Error, (Stream* stream, Graph** graph))             \
  X(hipGraphInstantiate, Error,                                              \
    (GraphExec** exec, Graph* graph, GraphNode** error_node, char* log,      \
     size_t log_size))                                                       \
  X(hipGraphDestroy, Error, (Graph* graph))                                  \
  X(hipGraphExecDestroy, Error, (GraphExec* exec))                           \
  X(hipGraphLaunch, Error, (GraphExec* exec, Stream* stream))
// clang-format on

// Entry points a runtime may lack: the backend does without them
// (hipMallocAsync/hipFreeAsync: plain hipMalloc/hipFree).
inline bool IsOptional(std::string_view name) {
  return name == "hipMallocAsync" || name == "hipFreeAsync";
}

}  // namespace gpustream::backend::hipapi

#endif  // GPUSTREAM_SERVER_BACKEND_HIP_HIP_API_H_
