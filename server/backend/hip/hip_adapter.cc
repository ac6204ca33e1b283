// Each GpuDriver operation as HIP runtime calls.
#include "server/backend/hip/hip_adapter.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/backend/hip/hip_code_object.h"
#include "server/backend/hip/hip_status.h"

namespace gpustream::backend {
namespace {

absl::Status NoClusters() {
  return absl::UnimplementedError(
      "HIP has no thread block clusters (ROCm 5.2's runtime lacks them)");
}

absl::Status NoCooperativeLaunch() {
  return absl::UnimplementedError(
      "HIP 5.2 launches cooperative kernels only from host-registered "
      "functions (hipLaunchCooperativeKernel), not from loaded modules");
}

// The layer's opaque handles are the runtime's own pointers.
hipapi::Stream* Hip(GpuStreamHandle s) {
  return reinterpret_cast<hipapi::Stream*>(s);
}
hipapi::Event* Hip(GpuEventHandle e) {
  return reinterpret_cast<hipapi::Event*>(e);
}
hipapi::Context* Hip(GpuContextHandle c) {
  return reinterpret_cast<hipapi::Context*>(c);
}
hipapi::Module* Hip(GpuModuleHandle m) {
  return reinterpret_cast<hipapi::Module*>(m);
}
hipapi::Function* Hip(GpuFunctionHandle f) {
  return reinterpret_cast<hipapi::Function*>(f);
}
// hipDeviceptr_t is a void*; the layer keeps addresses as integers.
void* Hip(GpuDeviceptr p) { return reinterpret_cast<void*>(p); }
GpuDeviceptr Address(void* p) { return reinterpret_cast<GpuDeviceptr>(p); }

}  // namespace

HipAdapter::HipAdapter(std::unique_ptr<HipDriver> driver)
    : driver_(std::move(driver)),
      traits_{.name = "hip",
              .display_name = "HIP",
              // Code objects and clang offload bundles (hipcc --genco
              // writes .hsaco; clang -c of HIP device code, .hipfb).
              .module_extensions = {".hsaco", ".co", ".hipfb"},
              // AMD GPUs map device memory in 2 MiB fragments too (the
              // fault granule of gfx9's page tables).
              .device_page_bytes = uint64_t{2} << 20,
              // hipStreamWaitValue64's GREATER_EQUAL does not wrap around,
              // and in ROCm 5.x each wait is a spinning kernel on a
              // hardware queue other streams share: the daemon holds
              // queues' flag waits instead.
              .native_wait_value = false,
              // ROCclr 5.2 aborts the process on a queue error (a kernel
              // fault); not known otherwise for later runtimes.
              .faults_recoverable = false,
              // hipDevicePrimaryCtxReset is a no-op in ROCm 5.2: it frees
              // nothing and clears nothing.
              .context_reset = false,
              .graphs = true} {}

std::string HipAdapter::Describe() const {
  return absl::StrCat(driver_->path, " (HIP ", driver_->version / 10000000, ".",
                      driver_->version / 100000 % 100, ")");
}

absl::StatusOr<int> HipAdapter::DeviceCount() const {
  int count = 0;
  if (absl::Status s = ToStatus(driver_->hipGetDeviceCount(&count),
                                "hipGetDeviceCount", driver_.get());
      !s.ok()) {
    return s;
  }
  return count;
}

absl::StatusOr<GpuDeviceProperties> HipAdapter::DeviceProperties(
    int ordinal) const {
  const HipDriver& d = *driver_;
  hipapi::Device dev = 0;
  if (absl::Status s =
          ToStatus(d.hipDeviceGet(&dev, ordinal), "hipDeviceGet", &d);
      !s.ok()) {
    return s;
  }
  char name[256] = {};
  d.hipDeviceGetName(name, sizeof(name) - 1, dev);
  auto prop = std::make_unique<hipapi::DeviceProp>();
  if (absl::Status s = ToStatus(d.hipGetDeviceProperties(prop.get(), ordinal),
                                "hipGetDeviceProperties", &d);
      !s.ok()) {
    return s;
  }
  char arch[hipapi::DeviceProp::kGcnArchNameSize + 1] = {};
  std::memcpy(arch, prop->bytes + hipapi::DeviceProp::kGcnArchNameOffset,
              hipapi::DeviceProp::kGcnArchNameSize);
  auto attr = [&](hipapi::DeviceAttribute a) {
    int v = 0;
    d.hipDeviceGetAttribute(&v, a, ordinal);
    return v;
  };
  auto u = [&](hipapi::DeviceAttribute a) {
    return static_cast<uint32_t>(attr(a));
  };
  GpuDeviceProperties p;
  p.info.name = name;
  // "gfx90a:sramecc+:xnack-": the processor, without its feature flags.
  p.target_id = arch;  // "gfx90a:sramecc+:xnack-"
  p.info.arch = p.target_id.substr(0, p.target_id.find(':'));
  p.info.multiprocessor_count = u(hipapi::kAttrMultiprocessorCount);
  int least = 0, greatest = 0;
  d.hipDeviceGetStreamPriorityRange(&least, &greatest);
  p.info.priority_least = least;
  p.info.priority_greatest = greatest;
  p.info.supports_wait_value = attr(hipapi::kAttrCanUseStreamWaitValue) != 0;
  p.memory_pools = attr(hipapi::kAttrMemoryPoolsSupported) != 0 &&
                   d.hipMallocAsync != nullptr && d.hipFreeAsync != nullptr;
  p.info.max_grid = {u(hipapi::kAttrMaxGridDimX), u(hipapi::kAttrMaxGridDimY),
                     u(hipapi::kAttrMaxGridDimZ)};
  p.info.max_block = {u(hipapi::kAttrMaxBlockDimX),
                      u(hipapi::kAttrMaxBlockDimY),
                      u(hipapi::kAttrMaxBlockDimZ)};
  p.info.max_threads_per_block = u(hipapi::kAttrMaxThreadsPerBlock);
  // AMD has no opt-in: a kernel may use all of a block's LDS.
  p.info.max_shared_memory_bytes = u(hipapi::kAttrMaxSharedMemoryPerBlock);
  return p;
}

absl::StatusOr<uint64_t> HipAdapter::DeviceTotalMemory(int ordinal) const {
  hipapi::Device dev = 0;
  size_t total = 0;
  if (absl::Status s = ToStatus(driver_->hipDeviceGet(&dev, ordinal),
                                "hipDeviceGet", driver_.get());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ToStatus(driver_->hipDeviceTotalMem(&total, dev),
                                "hipDeviceTotalMem", driver_.get());
      !s.ok()) {
    return s;
  }
  return total;
}

absl::StatusOr<GpuContextHandle> HipAdapter::PrimaryContextRetain(
    int ordinal) const {
  hipapi::Device dev = 0;
  hipapi::Context* context = nullptr;
  if (absl::Status s = ToStatus(driver_->hipDeviceGet(&dev, ordinal),
                                "hipDeviceGet", driver_.get());
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ToStatus(driver_->hipDevicePrimaryCtxRetain(&context, dev),
                   "hipDevicePrimaryCtxRetain", driver_.get());
      !s.ok()) {
    return s;
  }
  return reinterpret_cast<GpuContextHandle>(context);
}

absl::Status HipAdapter::PrimaryContextRelease(int ordinal) const {
  return ToStatus(driver_->hipDevicePrimaryCtxRelease(ordinal),
                  "hipDevicePrimaryCtxRelease", driver_.get());
}

absl::Status HipAdapter::PrimaryContextReset(int ordinal) const {
  return ToStatus(driver_->hipDevicePrimaryCtxReset(ordinal),
                  "hipDevicePrimaryCtxReset", driver_.get());
}

absl::Status HipAdapter::SetCurrent(GpuContextHandle context) const {
  return ToStatus(driver_->hipCtxSetCurrent(Hip(context)), "hipCtxSetCurrent",
                  driver_.get());
}

// ROCm's runtime aborts the process on a kernel fault, and hipCtxCreate is
// deprecated: a context of the daemon's own would contain nothing.
absl::StatusOr<GpuContextHandle> HipAdapter::ContextCreate(int) const {
  return absl::UnimplementedError(
      "HIP has no context per tenant: ROCm's runtime aborts the whole "
      "process on a kernel fault, so a context of its own would contain "
      "nothing (hipCtxCreate is deprecated)");
}

absl::Status HipAdapter::ContextDestroy(GpuContextHandle) const {
  return absl::UnimplementedError("HIP has no context per tenant");
}

absl::StatusOr<GpuSmLayout> HipAdapter::SmLayout(int) const {
  return absl::UnimplementedError(
      "HIP has no SM partitions (no green contexts; ROCm's CU masks are "
      "per stream and not guaranteed)");
}

absl::StatusOr<std::vector<GpuGreenContext>> HipAdapter::GreenContextsCreate(
    int, uint32_t, const std::vector<uint32_t>&) const {
  return absl::UnimplementedError("HIP has no green contexts");
}

absl::Status HipAdapter::GreenContextDestroy(GpuGreenHandle) const {
  return absl::UnimplementedError("HIP has no green contexts");
}

absl::StatusOr<GpuStreamHandle> HipAdapter::GreenStreamCreate(GpuGreenHandle,
                                                              int) const {
  return absl::UnimplementedError("HIP has no green contexts");
}

absl::Status HipAdapter::MemGetInfo(size_t* free, size_t* total) const {
  return ToStatus(driver_->hipMemGetInfo(free, total), "hipMemGetInfo",
                  driver_.get());
}

absl::StatusOr<GpuStreamHandle> HipAdapter::StreamCreate(int priority) const {
  hipapi::Stream* stream = nullptr;
  if (absl::Status s =
          ToStatus(driver_->hipStreamCreateWithPriority(
                       &stream, hipapi::kStreamNonBlocking, priority),
                   "hipStreamCreateWithPriority", driver_.get());
      !s.ok()) {
    return s;
  }
  return reinterpret_cast<GpuStreamHandle>(stream);
}

absl::Status HipAdapter::StreamDestroy(GpuStreamHandle stream) const {
  return ToStatus(driver_->hipStreamDestroy(Hip(stream)), "hipStreamDestroy",
                  driver_.get());
}

absl::StatusOr<bool> HipAdapter::StreamQuery(GpuStreamHandle stream) const {
  const hipapi::Error e = driver_->hipStreamQuery(Hip(stream));
  if (e == hipapi::kSuccess) [[likely]] {
    return true;
  }
  if (e == hipapi::kErrorNotReady) return false;
  return HipError(e, "hipStreamQuery", driver_.get());
}

absl::Status HipAdapter::StreamSynchronize(GpuStreamHandle stream) const {
  return ToStatus(driver_->hipStreamSynchronize(Hip(stream)),
                  "hipStreamSynchronize", driver_.get());
}

absl::Status HipAdapter::StreamWaitEvent(GpuStreamHandle stream,
                                         GpuEventHandle event) const {
  return ToStatus(driver_->hipStreamWaitEvent(Hip(stream), Hip(event), 0),
                  "hipStreamWaitEvent", driver_.get());
}

absl::Status HipAdapter::StreamWriteValue64(GpuStreamHandle stream,
                                            GpuDeviceptr address,
                                            uint64_t value) const {
  return ToStatus(
      driver_->hipStreamWriteValue64(Hip(stream), Hip(address), value, 0),
      "hipStreamWriteValue64", driver_.get());
}

absl::StatusOr<GpuEventHandle> HipAdapter::EventCreate(bool timing) const {
  hipapi::Event* event = nullptr;
  if (absl::Status s =
          ToStatus(driver_->hipEventCreateWithFlags(
                       &event, timing ? 0 : hipapi::kEventDisableTiming),
                   "hipEventCreateWithFlags", driver_.get());
      !s.ok()) {
    return s;
  }
  return reinterpret_cast<GpuEventHandle>(event);
}

absl::Status HipAdapter::EventDestroy(GpuEventHandle event) const {
  return ToStatus(driver_->hipEventDestroy(Hip(event)), "hipEventDestroy",
                  driver_.get());
}

absl::Status HipAdapter::EventRecord(GpuEventHandle event,
                                     GpuStreamHandle stream) const {
  return ToStatus(driver_->hipEventRecord(Hip(event), Hip(stream)),
                  "hipEventRecord", driver_.get());
}

absl::StatusOr<bool> HipAdapter::EventQuery(GpuEventHandle event) const {
  const hipapi::Error e = driver_->hipEventQuery(Hip(event));
  if (e == hipapi::kSuccess) [[likely]] {
    return true;
  }
  if (e == hipapi::kErrorNotReady) return false;
  return HipError(e, "hipEventQuery", driver_.get());
}

absl::StatusOr<float> HipAdapter::EventElapsedMillis(GpuEventHandle start,
                                                     GpuEventHandle end) const {
  float ms = 0;
  if (absl::Status s =
          ToStatus(driver_->hipEventElapsedTime(&ms, Hip(start), Hip(end)),
                   "hipEventElapsedTime", driver_.get());
      !s.ok()) {
    return s;
  }
  return ms;
}

absl::StatusOr<GpuDeviceptr> HipAdapter::MemAlloc(size_t bytes) const {
  void* ptr = nullptr;
  if (absl::Status s =
          ToStatus(driver_->hipMalloc(&ptr, bytes), "hipMalloc", driver_.get());
      !s.ok()) {
    return s;
  }
  return Address(ptr);
}

absl::Status HipAdapter::MemFree(GpuDeviceptr ptr) const {
  return ToStatus(driver_->hipFree(Hip(ptr)), "hipFree", driver_.get());
}

absl::StatusOr<GpuDeviceptr> HipAdapter::MemAllocAsync(
    size_t bytes, GpuStreamHandle stream) const {
  if (driver_->hipMallocAsync == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("the HIP runtime ", driver_->path,
                     " has no hipMallocAsync (stream-ordered allocation)"));
  }
  void* ptr = nullptr;
  if (absl::Status s =
          ToStatus(driver_->hipMallocAsync(&ptr, bytes, Hip(stream)),
                   "hipMallocAsync", driver_.get());
      !s.ok()) {
    return s;
  }
  return Address(ptr);
}

absl::Status HipAdapter::MemFreeAsync(GpuDeviceptr ptr,
                                      GpuStreamHandle stream) const {
  if (driver_->hipFreeAsync == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "the HIP runtime ", driver_->path, " has no hipFreeAsync"));
  }
  return ToStatus(driver_->hipFreeAsync(Hip(ptr), Hip(stream)), "hipFreeAsync",
                  driver_.get());
}

absl::StatusOr<void*> HipAdapter::HostAlloc(size_t bytes, bool mapped) const {
  void* host = nullptr;
  const unsigned flags =
      mapped ? hipapi::kHostMallocMapped | hipapi::kHostMallocPortable : 0;
  if (absl::Status s = ToStatus(driver_->hipHostMalloc(&host, bytes, flags),
                                "hipHostMalloc", driver_.get());
      !s.ok()) {
    return s;
  }
  return host;
}

absl::Status HipAdapter::HostFree(void* host) const {
  return ToStatus(driver_->hipHostFree(host), "hipHostFree", driver_.get());
}

absl::Status HipAdapter::HostRegister(void* host, size_t bytes) const {
  return ToStatus(
      driver_->hipHostRegister(host, bytes, hipapi::kHostRegisterMapped),
      "hipHostRegister", driver_.get());
}

absl::Status HipAdapter::HostUnregister(void* host) const {
  return ToStatus(driver_->hipHostUnregister(host), "hipHostUnregister",
                  driver_.get());
}

absl::StatusOr<GpuDeviceptr> HipAdapter::HostDevicePointer(void* host) const {
  void* ptr = nullptr;
  if (absl::Status s = ToStatus(driver_->hipHostGetDevicePointer(&ptr, host, 0),
                                "hipHostGetDevicePointer", driver_.get());
      !s.ok()) {
    return s;
  }
  return Address(ptr);
}

absl::Status HipAdapter::MemcpyHtoDAsync(GpuDeviceptr dst, const void* src,
                                         size_t bytes,
                                         GpuStreamHandle stream) const {
  // HIP declares the source without const; it only reads it.
  return ToStatus(driver_->hipMemcpyHtoDAsync(Hip(dst), const_cast<void*>(src),
                                              bytes, Hip(stream)),
                  "hipMemcpyHtoDAsync", driver_.get());
}

absl::Status HipAdapter::MemcpyDtoHAsync(void* dst, GpuDeviceptr src,
                                         size_t bytes,
                                         GpuStreamHandle stream) const {
  return ToStatus(
      driver_->hipMemcpyDtoHAsync(dst, Hip(src), bytes, Hip(stream)),
      "hipMemcpyDtoHAsync", driver_.get());
}

absl::Status HipAdapter::MemcpyDtoDAsync(GpuDeviceptr dst, GpuDeviceptr src,
                                         size_t bytes,
                                         GpuStreamHandle stream) const {
  return ToStatus(
      driver_->hipMemcpyDtoDAsync(Hip(dst), Hip(src), bytes, Hip(stream)),
      "hipMemcpyDtoDAsync", driver_.get());
}

absl::Status HipAdapter::MemsetD32Async(GpuDeviceptr dst, uint32_t value,
                                        size_t count,
                                        GpuStreamHandle stream) const {
  return ToStatus(driver_->hipMemsetD32Async(Hip(dst), static_cast<int>(value),
                                             count, Hip(stream)),
                  "hipMemsetD32Async", driver_.get());
}

absl::StatusOr<GpuModuleHandle> HipAdapter::ModuleLoad(
    const std::string& image, absl::string_view target) const {
  // The runtime is given no size and trusts the image's headers: it gets
  // only the code object for this device, checked whole first. A refusal
  // says what the image lacks and how to build one that has it.
  absl::StatusOr<absl::string_view> code = AmdCodeObjectFor(image, target);
  if (!code.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(code.status().message(),
                     code.status().code() == absl::StatusCode::kNotFound
                         ? absl::StrCat(": build it with --offload-arch=",
                                        target.substr(0, target.find(':')))
                         : ""));
  }
  hipapi::Module* module = nullptr;
  if (absl::Status s =
          ToStatus(driver_->hipModuleLoadData(&module, code->data()),
                   "hipModuleLoadData", driver_.get());
      !s.ok()) {
    return s;
  }
  return reinterpret_cast<GpuModuleHandle>(module);
}

absl::Status HipAdapter::ModuleUnload(GpuModuleHandle module) const {
  return ToStatus(driver_->hipModuleUnload(Hip(module)), "hipModuleUnload",
                  driver_.get());
}

absl::StatusOr<GpuFunctionHandle> HipAdapter::ModuleFunction(
    GpuModuleHandle module, const std::string& name) const {
  hipapi::Function* fn = nullptr;
  if (absl::Status s = ToStatus(
          driver_->hipModuleGetFunction(&fn, Hip(module), name.c_str()),
          "hipModuleGetFunction", driver_.get());
      !s.ok()) {
    return s;
  }
  return reinterpret_cast<GpuFunctionHandle>(fn);
}

absl::StatusOr<std::vector<GpuParamInfo>> HipAdapter::KernelParams(
    GpuFunctionHandle /*function*/, const std::string& image,
    const std::string& name, absl::string_view target) const {
  // The runtime does not say; the code object's metadata does, kinds too.
  absl::StatusOr<absl::string_view> code = AmdCodeObjectFor(image, target);
  if (!code.ok()) return code.status();
  absl::StatusOr<std::vector<AmdKernel>> kernels = ReadAmdKernels(*code);
  if (!kernels.ok()) return kernels.status();
  for (const AmdKernel& kernel : *kernels) {
    if (kernel.name != name) continue;
    std::vector<GpuParamInfo> params;
    for (const AmdKernelArg& arg : kernel.args) {
      using Kind = GpuParamInfo::Kind;
      params.push_back({arg.offset, arg.size,
                        arg.value_kind == "global_buffer" ? Kind::kGlobalBuffer
                        : arg.value_kind == "by_value"    ? Kind::kByValue
                                                          : Kind::kOther});
    }
    return params;
  }
  return absl::NotFoundError(absl::StrCat(
      "the code object for ", target, " has no metadata for kernel ", name));
}

GpuFunctionLimits HipAdapter::FunctionLimits(GpuFunctionHandle function) const {
  int max_threads = 0, static_shared = 0, allowed_dynamic = 0;
  driver_->hipFuncGetAttribute(&max_threads, hipapi::kFuncMaxThreadsPerBlock,
                               Hip(function));
  driver_->hipFuncGetAttribute(&static_shared, hipapi::kFuncSharedSizeBytes,
                               Hip(function));
  driver_->hipFuncGetAttribute(
      &allowed_dynamic, hipapi::kFuncMaxDynamicSharedSizeBytes, Hip(function));
  return {static_cast<uint32_t>(max_threads),
          static_cast<uint32_t>(static_shared),
          static_cast<uint32_t>(allowed_dynamic)};
}

absl::Status HipAdapter::SetMaxDynamicShared(GpuFunctionHandle /*function*/,
                                             uint32_t /*bytes*/) const {
  // AMD kernels need no opt-in: any launch within the block's LDS runs (the
  // module validated `bytes` against it); a larger one fails its launch.
  return absl::OkStatus();
}

// HIP 5.2 has no thread block clusters, and launches cooperative kernels
// only from functions registered by a host program
// (hipLaunchCooperativeKernel), never from a loaded module: the device
// reports neither (max_cluster_size 0, supports_cooperative_launch false),
// so validation refuses such launches before they get here.
absl::Status HipAdapter::AllowNonPortableClusters(GpuFunctionHandle) const {
  return NoClusters();
}

absl::StatusOr<uint32_t> HipAdapter::MaxClusterSize(GpuFunctionHandle,
                                                    const LaunchConfig&) const {
  return NoClusters();
}

absl::StatusOr<uint32_t> HipAdapter::ResidentBlocksPerSm(GpuFunctionHandle,
                                                         uint32_t,
                                                         uint32_t) const {
  return NoCooperativeLaunch();
}

absl::Status HipAdapter::LaunchKernel(GpuFunctionHandle function,
                                      const LaunchConfig& config,
                                      GpuStreamHandle stream,
                                      void** params) const {
  if (config.clustered) return NoClusters();
  if (config.cooperative) return NoCooperativeLaunch();
  return ToStatus(
      driver_->hipModuleLaunchKernel(
          Hip(function), config.grid.x, config.grid.y, config.grid.z,
          config.block.x, config.block.y, config.block.z,
          config.shared_memory_bytes, Hip(stream), params, nullptr),
      "hipModuleLaunchKernel", driver_.get());
}

}  // namespace gpustream::backend
