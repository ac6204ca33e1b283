// Each GpuDriver operation as CUDA driver calls.
#include "server/backend/cuda/cuda_adapter.h"

#include <cuda.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/backend/cuda/cuda_status.h"

namespace gpustream::backend {
namespace {

// The layer's opaque handles are the driver's own pointers.
CUstream Cu(GpuStreamHandle s) { return reinterpret_cast<CUstream>(s); }
CUevent Cu(GpuEventHandle e) { return reinterpret_cast<CUevent>(e); }
CUcontext Cu(GpuContextHandle c) { return reinterpret_cast<CUcontext>(c); }
CUmodule Cu(GpuModuleHandle m) { return reinterpret_cast<CUmodule>(m); }
CUfunction Cu(GpuFunctionHandle f) { return reinterpret_cast<CUfunction>(f); }
CUgreenCtx Cu(GpuGreenHandle g) { return reinterpret_cast<CUgreenCtx>(g); }

}  // namespace

CudaAdapter::CudaAdapter(std::unique_ptr<CudaDriver> driver)
    : driver_(std::move(driver)),
      traits_{.name = "cuda",
              .display_name = "CUDA",
              .module_extensions = {".fatbin", ".cubin", ".ptx"},
              // NVIDIA GPUs map device memory in 2 MiB pages (pools grow
              // by them too).
              .device_page_bytes = uint64_t{2} << 20,
              .graphs = true} {}

std::string CudaAdapter::Describe() const {
  return absl::StrCat(driver_->path, " (CUDA ", driver_->version / 1000, ".",
                      driver_->version % 1000 / 10, ")");
}

absl::StatusOr<int> CudaAdapter::DeviceCount() const {
  int count = 0;
  if (absl::Status s = ToStatus(driver_->cuDeviceGetCount(&count),
                                "cuDeviceGetCount", driver_.get());
      !s.ok()) {
    return s;
  }
  return count;
}

absl::StatusOr<GpuDeviceProperties> CudaAdapter::DeviceProperties(
    int ordinal) const {
  const CudaDriver& d = *driver_;
  CUdevice dev = 0;
  if (absl::Status s =
          ToStatus(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet", &d);
      !s.ok()) {
    return s;
  }
  char name[256] = {};
  d.cuDeviceGetName(name, sizeof(name) - 1, dev);
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    d.cuDeviceGetAttribute(&v, a, dev);
    return v;
  };
  auto u = [&](CUdevice_attribute a) { return static_cast<uint32_t>(attr(a)); };
  GpuDeviceProperties p;
  p.info.name = name;
  p.info.arch =
      absl::StrCat("sm_", attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                   attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  p.target_id = p.info.arch;
  p.info.multiprocessor_count = u(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  int least = 0, greatest = 0;
  d.cuCtxGetStreamPriorityRange(&least, &greatest);
  p.info.priority_least = least;
  p.info.priority_greatest = greatest;
  p.info.supports_wait_value =
      attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) != 0;
  p.memory_pools = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) != 0;
  p.info.max_grid = {u(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
                     u(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
                     u(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)};
  p.info.max_block = {u(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
                      u(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
                      u(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)};
  p.info.max_threads_per_block = u(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p.info.max_shared_memory_bytes =
      u(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  if (p.info.max_shared_memory_bytes == 0) {
    p.info.max_shared_memory_bytes =
        u(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  }
  // No attribute states the largest cluster: 8 blocks is portable from
  // sm_90 on, and Hopper and Blackwell data-center parts (sm_90, sm_100)
  // run 16 for kernels that allow non-portable sizes, which the daemon
  // sets on every kernel. Each launch is checked against the kernel's own
  // limit too (MaxClusterSize).
  if (attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH) != 0) {
    const int major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    p.info.max_cluster_size = major == 9 || major == 10 ? 16 : 8;
  }
  p.info.supports_cooperative_launch =
      attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH) != 0;
  return p;
}

absl::StatusOr<uint64_t> CudaAdapter::DeviceTotalMemory(int ordinal) const {
  CUdevice dev = 0;
  size_t total = 0;
  if (absl::Status s = ToStatus(driver_->cuDeviceGet(&dev, ordinal),
                                "cuDeviceGet", driver_.get());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ToStatus(driver_->cuDeviceTotalMem(&total, dev),
                                "cuDeviceTotalMem", driver_.get());
      !s.ok()) {
    return s;
  }
  return total;
}

absl::StatusOr<GpuContextHandle> CudaAdapter::PrimaryContextRetain(
    int ordinal) const {
  CUdevice dev = 0;
  CUcontext context = nullptr;
  if (absl::Status s = ToStatus(driver_->cuDeviceGet(&dev, ordinal),
                                "cuDeviceGet", driver_.get());
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ToStatus(driver_->cuDevicePrimaryCtxRetain(&context, dev),
                   "cuDevicePrimaryCtxRetain", driver_.get());
      !s.ok()) {
    return s;
  }
  return reinterpret_cast<GpuContextHandle>(context);
}

absl::Status CudaAdapter::PrimaryContextRelease(int ordinal) const {
  CUdevice dev = 0;
  if (absl::Status s = ToStatus(driver_->cuDeviceGet(&dev, ordinal),
                                "cuDeviceGet", driver_.get());
      !s.ok()) {
    return s;
  }
  return ToStatus(driver_->cuDevicePrimaryCtxRelease(dev),
                  "cuDevicePrimaryCtxRelease", driver_.get());
}

absl::Status CudaAdapter::PrimaryContextReset(int ordinal) const {
  CUdevice dev = 0;
  if (absl::Status s = ToStatus(driver_->cuDeviceGet(&dev, ordinal),
                                "cuDeviceGet", driver_.get());
      !s.ok()) {
    return s;
  }
  return ToStatus(driver_->cuDevicePrimaryCtxReset(dev),
                  "cuDevicePrimaryCtxReset", driver_.get());
}

absl::Status CudaAdapter::SetCurrent(GpuContextHandle context) const {
  return ToStatus(driver_->cuCtxSetCurrent(Cu(context)), "cuCtxSetCurrent",
                  driver_.get());
}

absl::StatusOr<GpuContextHandle> CudaAdapter::ContextCreate(int ordinal) const {
  CUdevice dev = 0;
  CUcontext context = nullptr;
  if (absl::Status s = ToStatus(driver_->cuDeviceGet(&dev, ordinal),
                                "cuDeviceGet", driver_.get());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ToStatus(driver_->cuCtxCreate(&context, nullptr, 0, dev),
                                "cuCtxCreate", driver_.get());
      !s.ok()) {
    return s;
  }
  // cuCtxCreate pushed it onto this thread's context stack: pop it, so
  // that stacks do not grow with each tenant (callers set contexts
  // current themselves).
  CUcontext popped = nullptr;
  if (absl::Status s = ToStatus(driver_->cuCtxPopCurrent(&popped),
                                "cuCtxPopCurrent", driver_.get());
      !s.ok()) {
    driver_->cuCtxDestroy(context);
    return s;
  }
  return reinterpret_cast<GpuContextHandle>(context);
}

absl::Status CudaAdapter::ContextDestroy(GpuContextHandle context) const {
  return ToStatus(driver_->cuCtxDestroy(Cu(context)), "cuCtxDestroy",
                  driver_.get());
}

absl::StatusOr<GpuSmLayout> CudaAdapter::SmLayout(int ordinal) const {
  CUdevice dev = 0;
  CUdevResource sms;
  if (absl::Status s = ToStatus(driver_->cuDeviceGet(&dev, ordinal),
                                "cuDeviceGet", driver_.get());
      !s.ok()) {
    return s;
  }
  const CUresult r =
      driver_->cuDeviceGetDevResource(dev, &sms, CU_DEV_RESOURCE_TYPE_SM);
  if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_RESOURCE_TYPE) {
    return absl::UnimplementedError(absl::StrCat(
        "CUDA device ", ordinal,
        " has no SM partitions (green contexts need compute capability "
        "6.0 or newer and a driver for CUDA 12.4 or newer)"));
  }
  if (absl::Status s = ToStatus(r, "cuDeviceGetDevResource", driver_.get());
      !s.ok()) {
    return s;
  }
  const uint32_t alignment = std::max(1u, sms.sm.smCoscheduledAlignment);
  const uint32_t minimum = std::max(sms.sm.minSmPartitionSize, alignment);
  GpuSmLayout layout{
      .sm_count = sms.sm.smCount,
      .group_sms = (minimum + alignment - 1) / alignment * alignment};
  // The driver may make fewer groups than the count divides into (cluster
  // and alignment rules): ask it.
  unsigned groups = 0;
  if (absl::Status s =
          ToStatus(driver_->cuDevSmResourceSplitByCount(
                       nullptr, &groups, &sms, nullptr, 0, layout.group_sms),
                   "cuDevSmResourceSplitByCount", driver_.get());
      !s.ok()) {
    return s;
  }
  layout.groups = groups;
  return layout;
}

absl::StatusOr<std::vector<GpuGreenContext>> CudaAdapter::GreenContextsCreate(
    int ordinal, uint32_t group_sms,
    const std::vector<uint32_t>& groups) const {
  const CudaDriver& d = *driver_;
  CUdevice dev = 0;
  CUdevResource sms;
  if (absl::Status s =
          ToStatus(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet", &d);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ToStatus(d.cuDeviceGetDevResource(dev, &sms, CU_DEV_RESOURCE_TYPE_SM),
                   "cuDeviceGetDevResource", &d);
      !s.ok()) {
    return s;
  }
  uint32_t wanted = 0;
  for (uint32_t n : groups) wanted += n;
  // One split into equal groups; each partition's descriptor joins its
  // share of them (the driver makes only symmetrical splits, and a
  // descriptor may join groups of one split).
  std::vector<CUdevResource> split(wanted);
  unsigned made = wanted;
  if (absl::Status s =
          ToStatus(d.cuDevSmResourceSplitByCount(split.data(), &made, &sms,
                                                 nullptr, 0, group_sms),
                   "cuDevSmResourceSplitByCount", &d);
      !s.ok()) {
    return s;
  }
  if (made < wanted) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", ordinal, " splits its ", sms.sm.smCount,
        " SMs into only ", made, " groups of ", group_sms, ", not ", wanted));
  }
  std::vector<GpuGreenContext> greens;
  auto undo = [&] {
    for (const GpuGreenContext& g : greens) d.cuGreenCtxDestroy(Cu(g.handle));
  };
  uint32_t next = 0;
  for (uint32_t n : groups) {
    uint32_t sms_given = 0;
    for (uint32_t i = next; i < next + n; ++i) {
      sms_given += split[i].sm.smCount;
    }
    CUdevResourceDesc desc = nullptr;
    CUgreenCtx green = nullptr;
    absl::Status s =
        ToStatus(d.cuDevResourceGenerateDesc(&desc, &split[next], n),
                 "cuDevResourceGenerateDesc", &d);
    if (s.ok()) {
      s = ToStatus(
          d.cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM),
          "cuGreenCtxCreate", &d);
    }
    if (!s.ok()) {
      undo();
      return s;
    }
    greens.push_back({reinterpret_cast<GpuGreenHandle>(green), sms_given});
    next += n;
  }
  return greens;
}

absl::Status CudaAdapter::GreenContextDestroy(GpuGreenHandle green) const {
  return ToStatus(driver_->cuGreenCtxDestroy(Cu(green)), "cuGreenCtxDestroy",
                  driver_.get());
}

absl::StatusOr<GpuStreamHandle> CudaAdapter::GreenStreamCreate(
    GpuGreenHandle green, int priority) const {
  CUstream stream = nullptr;
  if (absl::Status s =
          ToStatus(driver_->cuGreenCtxStreamCreate(
                       &stream, Cu(green), CU_STREAM_NON_BLOCKING, priority),
                   "cuGreenCtxStreamCreate", driver_.get());
      !s.ok()) {
    return s;
  }
  return reinterpret_cast<GpuStreamHandle>(stream);
}

absl::Status CudaAdapter::MemGetInfo(size_t* free, size_t* total) const {
  return ToStatus(driver_->cuMemGetInfo(free, total), "cuMemGetInfo",
                  driver_.get());
}

absl::StatusOr<GpuStreamHandle> CudaAdapter::StreamCreate(int priority) const {
  CUstream stream = nullptr;
  if (absl::Status s = ToStatus(driver_->cuStreamCreateWithPriority(
                                    &stream, CU_STREAM_NON_BLOCKING, priority),
                                "cuStreamCreateWithPriority", driver_.get());
      !s.ok()) {
    return s;
  }
  return reinterpret_cast<GpuStreamHandle>(stream);
}

absl::Status CudaAdapter::StreamDestroy(GpuStreamHandle stream) const {
  return ToStatus(driver_->cuStreamDestroy(Cu(stream)), "cuStreamDestroy",
                  driver_.get());
}

absl::StatusOr<bool> CudaAdapter::StreamQuery(GpuStreamHandle stream) const {
  const CUresult r = driver_->cuStreamQuery(Cu(stream));
  if (r == CUDA_SUCCESS) [[likely]] {
    return true;
  }
  if (r == CUDA_ERROR_NOT_READY) return false;
  return CudaError(r, "cuStreamQuery", driver_.get());
}

absl::Status CudaAdapter::StreamSynchronize(GpuStreamHandle stream) const {
  return ToStatus(driver_->cuStreamSynchronize(Cu(stream)),
                  "cuStreamSynchronize", driver_.get());
}

absl::Status CudaAdapter::StreamWaitEvent(GpuStreamHandle stream,
                                          GpuEventHandle event) const {
  return ToStatus(driver_->cuStreamWaitEvent(Cu(stream), Cu(event), 0),
                  "cuStreamWaitEvent", driver_.get());
}

absl::Status CudaAdapter::StreamWriteValue64(GpuStreamHandle stream,
                                             GpuDeviceptr address,
                                             uint64_t value) const {
  return ToStatus(driver_->cuStreamWriteValue64(Cu(stream), address, value,
                                                CU_STREAM_WRITE_VALUE_DEFAULT),
                  "cuStreamWriteValue64", driver_.get());
}

absl::Status CudaAdapter::StreamWaitValueEq(GpuStreamHandle stream,
                                            GpuDeviceptr address,
                                            uint64_t value) const {
  return ToStatus(driver_->cuStreamWaitValue64(Cu(stream), address, value,
                                               CU_STREAM_WAIT_VALUE_EQ),
                  "cuStreamWaitValue64", driver_.get());
}

absl::StatusOr<GpuEventHandle> CudaAdapter::EventCreate(bool timing) const {
  CUevent event = nullptr;
  if (absl::Status s = ToStatus(
          driver_->cuEventCreate(
              &event, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING),
          "cuEventCreate", driver_.get());
      !s.ok()) {
    return s;
  }
  return reinterpret_cast<GpuEventHandle>(event);
}

absl::Status CudaAdapter::EventDestroy(GpuEventHandle event) const {
  return ToStatus(driver_->cuEventDestroy(Cu(event)), "cuEventDestroy",
                  driver_.get());
}

absl::Status CudaAdapter::EventRecord(GpuEventHandle event,
                                      GpuStreamHandle stream) const {
  return ToStatus(driver_->cuEventRecord(Cu(event), Cu(stream)),
                  "cuEventRecord", driver_.get());
}

absl::StatusOr<bool> CudaAdapter::EventQuery(GpuEventHandle event) const {
  const CUresult r = driver_->cuEventQuery(Cu(event));
  if (r == CUDA_SUCCESS) [[likely]] {
    return true;
  }
  if (r == CUDA_ERROR_NOT_READY) return false;
  return CudaError(r, "cuEventQuery", driver_.get());
}

absl::StatusOr<float> CudaAdapter::EventElapsedMillis(
    GpuEventHandle start, GpuEventHandle end) const {
  float ms = 0;
  if (absl::Status s =
          ToStatus(driver_->cuEventElapsedTime(&ms, Cu(start), Cu(end)),
                   "cuEventElapsedTime", driver_.get());
      !s.ok()) {
    return s;
  }
  return ms;
}

absl::StatusOr<GpuDeviceptr> CudaAdapter::MemAlloc(size_t bytes) const {
  CUdeviceptr ptr = 0;
  if (absl::Status s = ToStatus(driver_->cuMemAlloc(&ptr, bytes), "cuMemAlloc",
                                driver_.get());
      !s.ok()) {
    return s;
  }
  return ptr;
}

absl::Status CudaAdapter::MemFree(GpuDeviceptr ptr) const {
  return ToStatus(driver_->cuMemFree(ptr), "cuMemFree", driver_.get());
}

absl::StatusOr<GpuDeviceptr> CudaAdapter::MemAllocAsync(
    size_t bytes, GpuStreamHandle stream) const {
  CUdeviceptr ptr = 0;
  if (absl::Status s =
          ToStatus(driver_->cuMemAllocAsync(&ptr, bytes, Cu(stream)),
                   "cuMemAllocAsync", driver_.get());
      !s.ok()) {
    return s;
  }
  return ptr;
}

absl::Status CudaAdapter::MemFreeAsync(GpuDeviceptr ptr,
                                       GpuStreamHandle stream) const {
  return ToStatus(driver_->cuMemFreeAsync(ptr, Cu(stream)), "cuMemFreeAsync",
                  driver_.get());
}

absl::StatusOr<void*> CudaAdapter::HostAlloc(size_t bytes, bool mapped) const {
  void* host = nullptr;
  const unsigned flags =
      mapped ? CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE : 0;
  if (absl::Status s = ToStatus(driver_->cuMemHostAlloc(&host, bytes, flags),
                                "cuMemHostAlloc", driver_.get());
      !s.ok()) {
    return s;
  }
  return host;
}

absl::Status CudaAdapter::HostFree(void* host) const {
  return ToStatus(driver_->cuMemFreeHost(host), "cuMemFreeHost", driver_.get());
}

absl::Status CudaAdapter::HostRegister(void* host, size_t bytes) const {
  return ToStatus(driver_->cuMemHostRegister(host, bytes,
                                             CU_MEMHOSTREGISTER_DEVICEMAP |
                                                 CU_MEMHOSTREGISTER_PORTABLE),
                  "cuMemHostRegister", driver_.get());
}

absl::Status CudaAdapter::HostUnregister(void* host) const {
  return ToStatus(driver_->cuMemHostUnregister(host), "cuMemHostUnregister",
                  driver_.get());
}

absl::StatusOr<GpuDeviceptr> CudaAdapter::HostDevicePointer(void* host) const {
  CUdeviceptr ptr = 0;
  if (absl::Status s =
          ToStatus(driver_->cuMemHostGetDevicePointer(&ptr, host, 0),
                   "cuMemHostGetDevicePointer", driver_.get());
      !s.ok()) {
    return s;
  }
  return ptr;
}

absl::Status CudaAdapter::MemcpyHtoDAsync(GpuDeviceptr dst, const void* src,
                                          size_t bytes,
                                          GpuStreamHandle stream) const {
  return ToStatus(driver_->cuMemcpyHtoDAsync(dst, src, bytes, Cu(stream)),
                  "cuMemcpyHtoDAsync", driver_.get());
}

absl::Status CudaAdapter::MemcpyDtoHAsync(void* dst, GpuDeviceptr src,
                                          size_t bytes,
                                          GpuStreamHandle stream) const {
  return ToStatus(driver_->cuMemcpyDtoHAsync(dst, src, bytes, Cu(stream)),
                  "cuMemcpyDtoHAsync", driver_.get());
}

absl::Status CudaAdapter::MemcpyDtoDAsync(GpuDeviceptr dst, GpuDeviceptr src,
                                          size_t bytes,
                                          GpuStreamHandle stream) const {
  return ToStatus(driver_->cuMemcpyDtoDAsync(dst, src, bytes, Cu(stream)),
                  "cuMemcpyDtoDAsync", driver_.get());
}

absl::Status CudaAdapter::MemsetD32Async(GpuDeviceptr dst, uint32_t value,
                                         size_t count,
                                         GpuStreamHandle stream) const {
  return ToStatus(driver_->cuMemsetD32Async(dst, value, count, Cu(stream)),
                  "cuMemsetD32Async", driver_.get());
}

absl::StatusOr<GpuModuleHandle> CudaAdapter::ModuleLoad(
    const std::string& image, absl::string_view target) const {
  CUmodule module = nullptr;
  const CUresult r = driver_->cuModuleLoadData(&module, image.data());
  if (r == CUDA_SUCCESS) return reinterpret_cast<GpuModuleHandle>(module);
  absl::Status s = CudaError(r, "cuModuleLoadData", driver_.get());
  // Say what the image lacks, and how to build one that has it.
  const std::string hint =
      r == CUDA_ERROR_NO_BINARY_FOR_GPU
          ? absl::StrCat(" (the image has neither SASS for ", target,
                         " nor PTX it can be compiled from: build it with "
                         "-gencode for this device)")
      : r == CUDA_ERROR_INVALID_PTX
          ? absl::StrCat(" (its PTX does not compile for ", target, ")")
          : "";
  return absl::Status(s.code(), absl::StrCat(s.message(), hint));
}

absl::Status CudaAdapter::ModuleUnload(GpuModuleHandle module) const {
  return ToStatus(driver_->cuModuleUnload(Cu(module)), "cuModuleUnload",
                  driver_.get());
}

absl::StatusOr<GpuFunctionHandle> CudaAdapter::ModuleFunction(
    GpuModuleHandle module, const std::string& name) const {
  CUfunction fn = nullptr;
  if (absl::Status s =
          ToStatus(driver_->cuModuleGetFunction(&fn, Cu(module), name.c_str()),
                   "cuModuleGetFunction", driver_.get());
      !s.ok()) {
    return s;
  }
  return reinterpret_cast<GpuFunctionHandle>(fn);
}

absl::StatusOr<std::vector<GpuParamInfo>> CudaAdapter::KernelParams(
    GpuFunctionHandle function, const std::string& /*image*/,
    const std::string& /*name*/, absl::string_view /*target*/) const {
  // The loaded function knows its parameters (CUDA 12.4+).
  std::vector<GpuParamInfo> params;
  for (size_t i = 0;; ++i) {
    size_t offset = 0, size = 0;
    if (driver_->cuFuncGetParamInfo(Cu(function), i, &offset, &size) !=
        CUDA_SUCCESS) {
      break;  // Past the last parameter.
    }
    params.push_back({offset, size});
  }
  return params;
}

GpuFunctionLimits CudaAdapter::FunctionLimits(
    GpuFunctionHandle function) const {
  int max_threads = 0, static_shared = 0, allowed_dynamic = 0;
  driver_->cuFuncGetAttribute(
      &max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, Cu(function));
  driver_->cuFuncGetAttribute(
      &static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, Cu(function));
  driver_->cuFuncGetAttribute(&allowed_dynamic,
                              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              Cu(function));
  return {static_cast<uint32_t>(max_threads),
          static_cast<uint32_t>(static_shared),
          static_cast<uint32_t>(allowed_dynamic)};
}

absl::Status CudaAdapter::SetMaxDynamicShared(GpuFunctionHandle function,
                                              uint32_t bytes) const {
  return ToStatus(
      driver_->cuFuncSetAttribute(
          Cu(function), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
          static_cast<int>(bytes)),
      "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", driver_.get());
}

absl::Status CudaAdapter::AllowNonPortableClusters(
    GpuFunctionHandle function) const {
  return ToStatus(
      driver_->cuFuncSetAttribute(
          Cu(function), CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
      "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)", driver_.get());
}

namespace {

CUlaunchConfig ToCuConfig(const LaunchConfig& config, CUstream stream) {
  CUlaunchConfig c{};
  c.gridDimX = config.grid.x;
  c.gridDimY = config.grid.y;
  c.gridDimZ = config.grid.z;
  c.blockDimX = config.block.x;
  c.blockDimY = config.block.y;
  c.blockDimZ = config.block.z;
  c.sharedMemBytes = config.shared_memory_bytes;
  c.hStream = stream;
  return c;
}

}  // namespace

absl::StatusOr<uint32_t> CudaAdapter::MaxClusterSize(
    GpuFunctionHandle function, const LaunchConfig& config) const {
  const CUlaunchConfig c = ToCuConfig(config, nullptr);
  int size = 0;
  if (absl::Status s = ToStatus(
          driver_->cuOccupancyMaxPotentialClusterSize(&size, Cu(function), &c),
          "cuOccupancyMaxPotentialClusterSize", driver_.get());
      !s.ok()) {
    return s;
  }
  return static_cast<uint32_t>(size);
}

absl::StatusOr<uint32_t> CudaAdapter::ResidentBlocksPerSm(
    GpuFunctionHandle function, uint32_t block_threads,
    uint32_t shared_bytes) const {
  int blocks = 0;
  if (absl::Status s = ToStatus(
          driver_->cuOccupancyMaxActiveBlocksPerMultiprocessor(
              &blocks, Cu(function), static_cast<int>(block_threads),
              shared_bytes),
          "cuOccupancyMaxActiveBlocksPerMultiprocessor", driver_.get());
      !s.ok()) {
    return s;
  }
  return static_cast<uint32_t>(blocks);
}

absl::Status CudaAdapter::LaunchKernel(GpuFunctionHandle function,
                                       const LaunchConfig& config,
                                       GpuStreamHandle stream,
                                       void** params) const {
  if (!config.clustered && !config.cooperative) {
    return ToStatus(
        driver_->cuLaunchKernel(Cu(function), config.grid.x, config.grid.y,
                                config.grid.z, config.block.x, config.block.y,
                                config.block.z, config.shared_memory_bytes,
                                Cu(stream), params, nullptr),
        "cuLaunchKernel", driver_.get());
  }
  CUlaunchAttribute attrs[2] = {};
  CUlaunchConfig c = ToCuConfig(config, Cu(stream));
  c.attrs = attrs;
  if (config.clustered) {
    CUlaunchAttribute& a = attrs[c.numAttrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = config.cluster.x;
    a.value.clusterDim.y = config.cluster.y;
    a.value.clusterDim.z = config.cluster.z;
  }
  if (config.cooperative) {
    CUlaunchAttribute& a = attrs[c.numAttrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    a.value.cooperative = 1;
  }
  return ToStatus(driver_->cuLaunchKernelEx(&c, Cu(function), params, nullptr),
                  "cuLaunchKernelEx", driver_.get());
}

}  // namespace gpustream::backend
