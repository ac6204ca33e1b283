// libfakecuda's entry points that are the emulated GPU's with CUDA's types:
// each translates handles and results and calls //tests/fake_gpu. The
// entry points with CUDA-only behaviour live in fake_cuda_device.cc
// (cuInit, cuDeviceGetAttribute), fake_cuda_image.cc (cuModuleLoadData),
// fake_errors.cc and fake_driver.cc (cuGetProcAddress).
#include <cstdio>

#include "tests/fake_cuda/fake_api.h"
#include "tests/fake_cuda/fake_cuda_skin.h"

namespace fakecuda {
namespace {

namespace gpu = fakegpu;

// The emulation's flags are CUDA's.
static_assert(gpu::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(gpu::kEventBlockingSync == CU_EVENT_BLOCKING_SYNC);
static_assert(gpu::kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(gpu::kEventInterprocess == CU_EVENT_INTERPROCESS);
static_assert(gpu::kHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(gpu::kHostAllocDevicemap == CU_MEMHOSTALLOC_DEVICEMAP);
static_assert(gpu::kHostAllocWritecombined == CU_MEMHOSTALLOC_WRITECOMBINED);
static_assert(gpu::kHostRegisterPortable == CU_MEMHOSTREGISTER_PORTABLE);
static_assert(gpu::kHostRegisterDevicemap == CU_MEMHOSTREGISTER_DEVICEMAP);
static_assert(gpu::kHostRegisterIoMemory == CU_MEMHOSTREGISTER_IOMEMORY);
static_assert(gpu::kHostRegisterReadOnly == CU_MEMHOSTREGISTER_READ_ONLY);
static_assert(gpu::kWaitValueGeq == CU_STREAM_WAIT_VALUE_GEQ);
static_assert(gpu::kWaitValueEq == CU_STREAM_WAIT_VALUE_EQ);
static_assert(gpu::kWaitValueAnd == CU_STREAM_WAIT_VALUE_AND);
static_assert(gpu::kWaitValueNor == CU_STREAM_WAIT_VALUE_NOR);
static_assert(gpu::kWaitValueFlush == CU_STREAM_WAIT_VALUE_FLUSH);
static_assert(gpu::kWriteValueDefault == CU_STREAM_WRITE_VALUE_DEFAULT);
static_assert(gpu::kWriteValueNoMemoryBarrier ==
              CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
static_assert(sizeof(gpu::DevicePtr) == sizeof(CUdeviceptr));

gpu::StreamHandle Gpu(CUstream s) { return HandleCast<gpu::StreamHandle>(s); }
gpu::EventHandle Gpu(CUevent e) { return HandleCast<gpu::EventHandle>(e); }
gpu::ContextHandle Gpu(CUcontext c) {
  return HandleCast<gpu::ContextHandle>(c);
}
gpu::ModuleHandle Gpu(CUmodule m) { return HandleCast<gpu::ModuleHandle>(m); }
gpu::FunctionHandle Gpu(CUfunction f) {
  return HandleCast<gpu::FunctionHandle>(f);
}

gpu::FunctionAttribute Gpu(CUfunction_attribute attribute) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      return gpu::FunctionAttribute::kMaxThreadsPerBlock;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      return gpu::FunctionAttribute::kSharedSizeBytes;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      return gpu::FunctionAttribute::kNumRegs;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      return gpu::FunctionAttribute::kMaxDynamicSharedSizeBytes;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      return gpu::FunctionAttribute::kNonPortableClusterSizeAllowed;
    default:
      return gpu::FunctionAttribute::kOther;
  }
}

}  // namespace

CUresult ToCu(gpu::Result result) {
  switch (result) {
    case gpu::Result::kSuccess:
      return CUDA_SUCCESS;
    case gpu::Result::kInvalidValue:
      return CUDA_ERROR_INVALID_VALUE;
    case gpu::Result::kOutOfMemory:
      return CUDA_ERROR_OUT_OF_MEMORY;
    case gpu::Result::kNotInitialized:
      return CUDA_ERROR_NOT_INITIALIZED;
    case gpu::Result::kNoDevice:
      return CUDA_ERROR_NO_DEVICE;
    case gpu::Result::kInvalidDevice:
      return CUDA_ERROR_INVALID_DEVICE;
    case gpu::Result::kInvalidImage:
      return CUDA_ERROR_INVALID_IMAGE;
    case gpu::Result::kInvalidContext:
      return CUDA_ERROR_INVALID_CONTEXT;
    case gpu::Result::kInvalidHandle:
      return CUDA_ERROR_INVALID_HANDLE;
    case gpu::Result::kNotFound:
      return CUDA_ERROR_NOT_FOUND;
    case gpu::Result::kNotReady:
      return CUDA_ERROR_NOT_READY;
    case gpu::Result::kNotSupported:
      return CUDA_ERROR_NOT_SUPPORTED;
    case gpu::Result::kContextIsDestroyed:
      return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    case gpu::Result::kLaunchOutOfResources:
      return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    case gpu::Result::kCooperativeLaunchTooLarge:
      return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    case gpu::Result::kInvalidClusterSize:
      return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    case gpu::Result::kInvalidResourceConfiguration:
      return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    case gpu::Result::kStreamCaptureUnsupported:
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    case gpu::Result::kStreamCaptureInvalidated:
      return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    case gpu::Result::kStreamCaptureWrongThread:
      return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    case gpu::Result::kIllegalState:
      return CUDA_ERROR_ILLEGAL_STATE;
    case gpu::Result::kHostMemoryAlreadyRegistered:
      return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    case gpu::Result::kHostMemoryNotRegistered:
      return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    case gpu::Result::kIllegalAddress:
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    case gpu::Result::kMisalignedAddress:
      return CUDA_ERROR_MISALIGNED_ADDRESS;
    case gpu::Result::kLaunchFailed:
      return CUDA_ERROR_LAUNCH_FAILED;
  }
  return CUDA_ERROR_UNKNOWN;
}

CUresult Fake_cuDeviceGetCount(int* count) {
  return ToCu(gpu::DeviceGetCount(count));
}

CUresult Fake_cuDeviceGet(CUdevice* device, int ordinal) {
  return ToCu(gpu::DeviceGet(device, ordinal));
}

CUresult Fake_cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult r = ToCu(gpu::DeviceGetName(name, len, dev));
      r != CUDA_SUCCESS) {
    return r;
  }
  std::snprintf(name, static_cast<size_t>(len), "Fake CUDA Device %d", dev);
  return CUDA_SUCCESS;
}

CUresult Fake_cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  return ToCu(gpu::DeviceTotalMem(bytes, dev));
}

CUresult Fake_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  return ToCu(
      gpu::DevicePrimaryCtxRetain(HandleCast<gpu::ContextHandle*>(pctx), dev));
}

CUresult Fake_cuDevicePrimaryCtxRelease(CUdevice dev) {
  return ToCu(gpu::DevicePrimaryCtxRelease(dev));
}

CUresult Fake_cuDevicePrimaryCtxReset(CUdevice dev) {
  return ToCu(gpu::DevicePrimaryCtxReset(dev));
}

CUresult Fake_cuCtxSetCurrent(CUcontext ctx) {
  return ToCu(gpu::CtxSetCurrent(Gpu(ctx)));
}

CUresult Fake_cuCtxGetCurrent(CUcontext* pctx) {
  return ToCu(gpu::CtxGetCurrent(HandleCast<gpu::ContextHandle*>(pctx)));
}

CUresult Fake_cuCtxSynchronize() { return ToCu(gpu::CtxSynchronize()); }

CUresult Fake_cuCtxSynchronize_v2(CUcontext ctx) {
  return ToCu(gpu::ContextSynchronize(Gpu(ctx)));
}

CUresult Fake_cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  return ToCu(gpu::CtxGetStreamPriorityRange(least, greatest));
}

CUresult Fake_cuStreamCreateWithPriority(CUstream* stream, unsigned int flags,
                                         int priority) {
  return ToCu(gpu::StreamCreateWithPriority(
      HandleCast<gpu::StreamHandle*>(stream), flags, priority));
}

CUresult Fake_cuStreamDestroy(CUstream stream) {
  return ToCu(gpu::StreamDestroy(Gpu(stream)));
}

CUresult Fake_cuStreamQuery(CUstream stream) {
  return ToCu(gpu::StreamQuery(Gpu(stream)));
}

CUresult Fake_cuStreamSynchronize(CUstream stream) {
  return ToCu(gpu::StreamSynchronize(Gpu(stream)));
}

CUresult Fake_cuStreamWaitEvent(CUstream stream, CUevent event,
                                unsigned int flags) {
  return ToCu(gpu::StreamWaitEvent(Gpu(stream), Gpu(event), flags));
}

CUresult Fake_cuStreamWaitValue64(CUstream stream, CUdeviceptr addr,
                                  cuuint64_t value, unsigned int flags) {
  return ToCu(gpu::StreamWaitValue64(Gpu(stream), addr, value, flags));
}

CUresult Fake_cuStreamWriteValue64(CUstream stream, CUdeviceptr addr,
                                   cuuint64_t value, unsigned int flags) {
  return ToCu(gpu::StreamWriteValue64(Gpu(stream), addr, value, flags));
}

CUresult Fake_cuLaunchHostFunc(CUstream stream, CUhostFn fn, void* data) {
  return ToCu(gpu::LaunchHostFunc(Gpu(stream), fn, data));
}

CUresult Fake_cuLaunchKernel(CUfunction f, unsigned int grid_x,
                             unsigned int grid_y, unsigned int grid_z,
                             unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_bytes,
                             CUstream stream, void** params, void** extra) {
  static_assert(CU_LAUNCH_PARAM_END == nullptr);
  return ToCu(gpu::LaunchKernel(Gpu(f), grid_x, grid_y, grid_z, block_x,
                                block_y, block_z, shared_bytes, Gpu(stream),
                                params, extra));
}

// Clusters need compute capability 9.0 (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH);
// each attribute may appear once; others are not modelled (NOT_SUPPORTED
// rather than silently ignored).
CUresult Fake_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                               void** params, void** extra) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  gpu::LaunchShape shape{
      {config->gridDimX, config->gridDimY, config->gridDimZ},
      {config->blockDimX, config->blockDimY, config->blockDimZ},
      config->sharedMemBytes,
      {0, 0, 0},
      false};
  bool clustered = false, cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    switch (a.id) {
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        if (clustered) return CUDA_ERROR_INVALID_VALUE;
        clustered = true;
        if (ComputeCapability() < 90) return CUDA_ERROR_NOT_SUPPORTED;
        shape.cluster[0] = a.value.clusterDim.x;
        shape.cluster[1] = a.value.clusterDim.y;
        shape.cluster[2] = a.value.clusterDim.z;
        if (shape.cluster[0] == 0 || shape.cluster[1] == 0 ||
            shape.cluster[2] == 0) {
          return CUDA_ERROR_INVALID_CLUSTER_SIZE;
        }
        break;
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        if (cooperative) return CUDA_ERROR_INVALID_VALUE;
        cooperative = true;
        shape.cooperative = a.value.cooperative != 0;
        break;
      default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  return ToCu(
      gpu::LaunchKernelEx(Gpu(f), shape, Gpu(config->hStream), params, extra));
}

CUresult Fake_cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks,
                                                          CUfunction f,
                                                          int block_size,
                                                          size_t shared) {
  return ToCu(gpu::OccupancyMaxActiveBlocksPerMultiprocessor(
      blocks, Gpu(f), block_size, shared));
}

CUresult Fake_cuOccupancyMaxPotentialClusterSize(int* size, CUfunction f,
                                                 const CUlaunchConfig* config) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ComputeCapability() < 90) return CUDA_ERROR_NOT_SUPPORTED;
  return ToCu(gpu::OccupancyMaxPotentialClusterSize(size, Gpu(f)));
}

CUresult Fake_cuEventCreate(CUevent* event, unsigned int flags) {
  return ToCu(gpu::EventCreate(HandleCast<gpu::EventHandle*>(event), flags));
}

CUresult Fake_cuEventDestroy(CUevent event) {
  return ToCu(gpu::EventDestroy(Gpu(event)));
}

CUresult Fake_cuEventRecord(CUevent event, CUstream stream) {
  return ToCu(gpu::EventRecord(Gpu(event), Gpu(stream)));
}

CUresult Fake_cuEventQuery(CUevent event) {
  return ToCu(gpu::EventQuery(Gpu(event)));
}

CUresult Fake_cuEventSynchronize(CUevent event) {
  return ToCu(gpu::EventSynchronize(Gpu(event)));
}

CUresult Fake_cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return ToCu(gpu::EventElapsedTime(ms, Gpu(start), Gpu(end)));
}

CUresult Fake_cuMemAlloc(CUdeviceptr* dptr, size_t bytes) {
  return ToCu(gpu::IntoDevicePtr(
      dptr, [&](gpu::DevicePtr* p) { return gpu::MemAlloc(p, bytes); }));
}

CUresult Fake_cuMemFree(CUdeviceptr dptr) { return ToCu(gpu::MemFree(dptr)); }

CUresult Fake_cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes,
                              CUstream stream) {
  return ToCu(gpu::IntoDevicePtr(dptr, [&](gpu::DevicePtr* p) {
    return gpu::MemAllocAsync(p, bytes, Gpu(stream));
  }));
}

CUresult Fake_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return ToCu(gpu::MemFreeAsync(dptr, Gpu(stream)));
}

CUresult Fake_cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  return ToCu(gpu::MemHostAlloc(pp, bytes, flags));
}

CUresult Fake_cuMemFreeHost(void* p) { return ToCu(gpu::MemFreeHost(p)); }

CUresult Fake_cuMemHostGetDevicePointer(CUdeviceptr* pdptr, void* p,
                                        unsigned int flags) {
  return ToCu(gpu::IntoDevicePtr(pdptr, [&](gpu::DevicePtr* d) {
    return gpu::MemHostGetDevicePointer(d, p, flags);
  }));
}

CUresult Fake_cuMemHostRegister(void* p, size_t bytesize, unsigned int flags) {
  return ToCu(gpu::MemHostRegister(p, bytesize, flags));
}

CUresult Fake_cuMemHostUnregister(void* p) {
  return ToCu(gpu::MemHostUnregister(p));
}

CUresult Fake_cuMemGetInfo(size_t* free, size_t* total) {
  return ToCu(gpu::MemGetInfo(free, total));
}

CUresult Fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n,
                                CUstream stream) {
  return ToCu(gpu::MemcpyHtoDAsync(dst, src, n, Gpu(stream)));
}

CUresult Fake_cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n,
                                CUstream stream) {
  return ToCu(gpu::MemcpyDtoHAsync(dst, src, n, Gpu(stream)));
}

CUresult Fake_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                CUstream stream) {
  return ToCu(gpu::MemcpyDtoDAsync(dst, src, n, Gpu(stream)));
}

CUresult Fake_cuMemsetD32Async(CUdeviceptr dst, unsigned int value,
                               size_t count, CUstream stream) {
  return ToCu(gpu::MemsetD32Async(dst, value, count, Gpu(stream)));
}

CUresult Fake_cuModuleUnload(CUmodule module) {
  return ToCu(gpu::ModuleUnload(Gpu(module)));
}

CUresult Fake_cuModuleGetFunction(CUfunction* function, CUmodule module,
                                  const char* name) {
  return ToCu(gpu::ModuleGetFunction(HandleCast<gpu::FunctionHandle*>(function),
                                     Gpu(module), name));
}

CUresult Fake_cuFuncGetParamInfo(CUfunction function, size_t index,
                                 size_t* offset, size_t* size) {
  return ToCu(gpu::FuncGetParamInfo(Gpu(function), index, offset, size));
}

// The function is checked first, then the attribute's range.
CUresult Fake_cuFuncGetAttribute(int* value, CUfunction_attribute attribute,
                                 CUfunction function) {
  int read = 0;
  if (CUresult r =
          ToCu(gpu::FuncGetAttribute(&read, Gpu(attribute), Gpu(function)));
      r != CUDA_SUCCESS) {
    return r;
  }
  if (value == nullptr || attribute < 0 || attribute >= CU_FUNC_ATTRIBUTE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *value = read;
  return CUDA_SUCCESS;
}

CUresult Fake_cuFuncSetAttribute(CUfunction function,
                                 CUfunction_attribute attribute, int value) {
  return ToCu(gpu::FuncSetAttribute(Gpu(function), Gpu(attribute), value));
}

}  // namespace fakecuda
