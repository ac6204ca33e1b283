// The GPU driver interface: the operations the GPU layer asks of a vendor's
// driver (CUDA's driver API, HIP's runtime), in vendor-neutral types. Each
// vendor folder implements it once (cuda/cuda_adapter, hip/hip_adapter);
// nothing in server/backend/gpu includes a vendor header.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_DRIVER_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_DRIVER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/backend/types.h"

namespace gpustream::backend {

// Native handles as the layer holds them: the vendor's own pointers, cast.
// Distinct types, so that a stream is never passed for an event.
using GpuContextHandle = struct GpuContextOpaque*;
using GpuStreamHandle = struct GpuStreamOpaque*;
using GpuEventHandle = struct GpuEventOpaque*;
using GpuModuleHandle = struct GpuModuleOpaque*;
using GpuFunctionHandle = struct GpuFunctionOpaque*;
// A green context: a partition of a device's SMs (CUgreenCtx).
using GpuGreenHandle = struct GpuGreenOpaque*;
// An executable graph (CUgraphExec): captured work, launched as one
// operation of a stream.
using GpuGraphExecHandle = struct GpuGraphExecOpaque*;
// A device address, as an integer (CUDA's and HIP's device pointers).
using GpuDeviceptr = uint64_t;

// What differs between vendors beyond the calls themselves.
struct GpuTraits {
  // "cuda", "hip": DeviceInfo::backend, log event prefixes.
  std::string name;
  // "CUDA", "HIP": in messages ("CUDA device 0 failed: ...").
  std::string display_name;
  // Module files this vendor loads, by extension (".fatbin", ".hsaco").
  std::vector<std::string> module_extensions;
  // Device memory page: the granularity of faults and of pool growth.
  uint64_t device_page_bytes = uint64_t{2} << 20;
  // DeviceInfo::native_wait_value and faults_recoverable of its devices.
  bool native_wait_value = true;
  bool faults_recoverable = true;
  // Whether PrimaryContextReset destroys the context's objects and errors
  // (CUDA's does; HIP's is a no-op): without it a failed device cannot be
  // recovered in the process (GpuDevice::Recover refuses).
  bool context_reset = true;
  // Whether the driver captures work into executable graphs (the Graphs
  // calls below); without, graphs are replayed command by command.
  bool graphs = false;
};

// The properties GpuDevice reads once, when it opens a device.
struct GpuDeviceProperties {
  // What the driver knows of DeviceInfo: name, arch ("sm_90", "gfx90a"),
  // multiprocessors, priority range, supports_wait_value (streams write and
  // wait on 64-bit words in mapped host memory), launch limits (shared
  // memory per block with the kernel's opt-in where the vendor has one).
  // GpuDevice fills in the rest from GpuTraits.
  DeviceInfo info;
  // What module loading matches code against: info.arch with the features
  // that select code (AMD's target ID, "gfx90a:sramecc+:xnack-"); CUDA:
  // info.arch.
  std::string target_id;
  // Stream-ordered allocation from the device's memory pool.
  bool memory_pools = false;
};

// How a device's SMs partition (green contexts): `sm_count` SMs, split
// into `groups` groups of `group_sms` (the device's minimum partition,
// rounded up to its alignment: 8 on Hopper), as the driver says it would
// split them.
struct GpuSmLayout {
  uint32_t sm_count = 0;
  uint32_t group_sms = 0;
  uint32_t groups = 0;
};

// A green context made by GreenContextsCreate, and its SMs as the driver
// gave them.
struct GpuGreenContext {
  GpuGreenHandle handle = nullptr;
  uint32_t sm_count = 0;
};

// A kernel's own limits, as the driver reports them.
struct GpuFunctionLimits {
  uint32_t max_threads_per_block = 0;
  uint32_t static_shared_bytes = 0;
  // Dynamic shared memory the function may use now (without opting in).
  uint32_t allowed_dynamic_shared_bytes = 0;
};

// One kernel parameter of the binary: where it goes in the argument block,
// and, where the binary says (AMD code objects do, CUDA's do not), whether
// it is a global buffer or a value.
struct GpuParamInfo {
  enum class Kind { kUnknown, kGlobalBuffer, kByValue, kOther };
  size_t offset = 0;
  size_t size = 0;
  Kind kind = Kind::kUnknown;
};

// Every call returns OK or a status that names the vendor's call and error
// (e.g. "cuStreamQuery: CUDA_ERROR_LAUNCH_FAILED (719): ..."), mapped as
// the backends promise: ABORTED exactly for errors that leave the context
// unusable (a kernel fault, a lost device), RESOURCE_EXHAUSTED for out of
// memory, INVALID_ARGUMENT for values or images refused, UNIMPLEMENTED for
// what the device cannot do, INTERNAL otherwise. Calls that act on a
// context need it current on the calling thread (CtxSetCurrent). The
// implementation is immutable after it is made: thread-safe.
class GpuDriver {
 public:
  virtual ~GpuDriver() = default;

  virtual const GpuTraits& traits() const = 0;
  // The library and version, for the backends log line.
  virtual std::string Describe() const = 0;

  // --- Devices and their primary contexts -----------------------------------
  virtual absl::StatusOr<int> DeviceCount() const = 0;
  // Properties of device `ordinal` (its primary context current).
  virtual absl::StatusOr<GpuDeviceProperties> DeviceProperties(
      int ordinal) const = 0;
  virtual absl::StatusOr<uint64_t> DeviceTotalMemory(int ordinal) const = 0;
  virtual absl::StatusOr<GpuContextHandle> PrimaryContextRetain(
      int ordinal) const = 0;
  virtual absl::Status PrimaryContextRelease(int ordinal) const = 0;
  // Destroys every object of the primary context.
  virtual absl::Status PrimaryContextReset(int ordinal) const = 0;
  virtual absl::Status SetCurrent(GpuContextHandle context) const = 0;
  // Free and total device memory of the current context's device.
  virtual absl::Status MemGetInfo(size_t* free, size_t* total) const = 0;

  // --- Contexts of the daemon's own, and SM partitions ----------------------
  // A new context on `ordinal` (an address space of its own, its own
  // sticky error), current on the calling thread; UNIMPLEMENTED where the
  // vendor's contexts would isolate nothing.
  virtual absl::StatusOr<GpuContextHandle> ContextCreate(int ordinal) const = 0;
  virtual absl::Status ContextDestroy(GpuContextHandle context) const = 0;
  // UNIMPLEMENTED where the device has no SM partitions.
  virtual absl::StatusOr<GpuSmLayout> SmLayout(int ordinal) const = 0;
  // One green context per entry of `groups`, holding that many groups of
  // `group_sms` SMs, all from one split of the device's SMs (so that they
  // are disjoint). FAILED_PRECONDITION if the device makes fewer groups.
  virtual absl::StatusOr<std::vector<GpuGreenContext>> GreenContextsCreate(
      int ordinal, uint32_t group_sms,
      const std::vector<uint32_t>& groups) const = 0;
  // Destroys a green context (and releases the primary context it
  // retained); its streams must be gone.
  virtual absl::Status GreenContextDestroy(GpuGreenHandle green) const = 0;
  // A stream of `green`, like StreamCreate's (whatever context is
  // current). Calls on one green context must not overlap (the vendor
  // does not synchronize them): GpuSmPartition serializes them.
  virtual absl::StatusOr<GpuStreamHandle> GreenStreamCreate(
      GpuGreenHandle green, int priority) const = 0;

  // --- Streams --------------------------------------------------------------
  // A stream that does not synchronize with the legacy default stream.
  virtual absl::StatusOr<GpuStreamHandle> StreamCreate(int priority) const = 0;
  virtual absl::Status StreamDestroy(GpuStreamHandle stream) const = 0;
  // True once all its work has completed; false while some is pending.
  virtual absl::StatusOr<bool> StreamQuery(GpuStreamHandle stream) const = 0;
  virtual absl::Status StreamSynchronize(GpuStreamHandle stream) const = 0;
  virtual absl::Status StreamWaitEvent(GpuStreamHandle stream,
                                       GpuEventHandle event) const = 0;
  // The stream stores `value` into the mapped word at `address`.
  virtual absl::Status StreamWriteValue64(GpuStreamHandle stream,
                                          GpuDeviceptr address,
                                          uint64_t value) const = 0;

  // --- Events ---------------------------------------------------------------
  virtual absl::StatusOr<GpuEventHandle> EventCreate(bool timing) const = 0;
  virtual absl::Status EventDestroy(GpuEventHandle event) const = 0;
  virtual absl::Status EventRecord(GpuEventHandle event,
                                   GpuStreamHandle stream) const = 0;
  // True once the record has completed.
  virtual absl::StatusOr<bool> EventQuery(GpuEventHandle event) const = 0;
  virtual absl::StatusOr<float> EventElapsedMillis(
      GpuEventHandle start, GpuEventHandle end) const = 0;

  // --- Memory ---------------------------------------------------------------
  virtual absl::StatusOr<GpuDeviceptr> MemAlloc(size_t bytes) const = 0;
  virtual absl::Status MemFree(GpuDeviceptr ptr) const = 0;
  // From the device's memory pool, ordered on `stream`.
  virtual absl::StatusOr<GpuDeviceptr> MemAllocAsync(
      size_t bytes, GpuStreamHandle stream) const = 0;
  virtual absl::Status MemFreeAsync(GpuDeviceptr ptr,
                                    GpuStreamHandle stream) const = 0;
  // Pinned host memory; `mapped`: also reachable from every device (and
  // from streams' value writes) at HostDevicePointer.
  virtual absl::StatusOr<void*> HostAlloc(size_t bytes, bool mapped) const = 0;
  virtual absl::Status HostFree(void* host) const = 0;
  virtual absl::StatusOr<GpuDeviceptr> HostDevicePointer(void* host) const = 0;
  // Page-locks the caller's memory and maps it for the device (reachable at
  // HostDevicePointer) until HostUnregister(host), which synchronizes the
  // context like HostFree; the memory must stay mapped until then.
  virtual absl::Status HostRegister(void* host, size_t bytes) const = 0;
  virtual absl::Status HostUnregister(void* host) const = 0;
  virtual absl::Status MemcpyHtoDAsync(GpuDeviceptr dst, const void* src,
                                       size_t bytes,
                                       GpuStreamHandle stream) const = 0;
  virtual absl::Status MemcpyDtoHAsync(void* dst, GpuDeviceptr src,
                                       size_t bytes,
                                       GpuStreamHandle stream) const = 0;
  virtual absl::Status MemcpyDtoDAsync(GpuDeviceptr dst, GpuDeviceptr src,
                                       size_t bytes,
                                       GpuStreamHandle stream) const = 0;
  virtual absl::Status MemsetD32Async(GpuDeviceptr dst, uint32_t value,
                                      size_t count,
                                      GpuStreamHandle stream) const = 0;

  // --- Modules and kernels --------------------------------------------------
  // Loads `image` into the current context. A refusal says what the image
  // lacks for `target` (the device's target_id) and how to build one that
  // has it.
  virtual absl::StatusOr<GpuModuleHandle> ModuleLoad(
      const std::string& image, absl::string_view target) const = 0;
  virtual absl::Status ModuleUnload(GpuModuleHandle module) const = 0;
  // NOT_FOUND when the module has no such kernel.
  virtual absl::StatusOr<GpuFunctionHandle> ModuleFunction(
      GpuModuleHandle module, const std::string& name) const = 0;
  // The kernel's parameters as the binary lays them out, in order (CUDA:
  // cuFuncGetParamInfo; HIP: the metadata of the code object for
  // `target`).
  virtual absl::StatusOr<std::vector<GpuParamInfo>> KernelParams(
      GpuFunctionHandle function, const std::string& image,
      const std::string& name, absl::string_view target) const = 0;
  virtual GpuFunctionLimits FunctionLimits(
      GpuFunctionHandle function) const = 0;
  // Opts the function in to `bytes` of dynamic shared memory per block.
  virtual absl::Status SetMaxDynamicShared(GpuFunctionHandle function,
                                           uint32_t bytes) const = 0;
  // Lets the function's clusters grow past the portable size where the
  // device allows (CUDA: NON_PORTABLE_CLUSTER_SIZE_ALLOWED). A refusal (a
  // kernel compiled with fixed cluster dimensions) leaves it portable.
  virtual absl::Status AllowNonPortableClusters(
      GpuFunctionHandle function) const = 0;
  // The most blocks per cluster the function can launch with in `config`
  // (its grid, block and shared memory; CUDA:
  // cuOccupancyMaxPotentialClusterSize). UNIMPLEMENTED without clusters.
  virtual absl::StatusOr<uint32_t> MaxClusterSize(
      GpuFunctionHandle function, const LaunchConfig& config) const = 0;
  // How many blocks of `block_threads` threads and `shared_bytes` of
  // dynamic shared memory one SM holds resident at once (CUDA:
  // cuOccupancyMaxActiveBlocksPerMultiprocessor): a cooperative grid may
  // have that many times the SMs it runs on.
  virtual absl::StatusOr<uint32_t> ResidentBlocksPerSm(
      GpuFunctionHandle function, uint32_t block_threads,
      uint32_t shared_bytes) const = 0;
  // `params[i]` points at argument i (GpuArgBlock::pointers). Clusters and
  // cooperative launches go through the extended launch (CUDA:
  // cuLaunchKernelEx with their attributes); a driver without them answers
  // UNIMPLEMENTED.
  virtual absl::Status LaunchKernel(GpuFunctionHandle function,
                                    const LaunchConfig& config,
                                    GpuStreamHandle stream,
                                    void** params) const = 0;

  // --- Graphs (traits().graphs; UNIMPLEMENTED without) ----------------------
  // Starts capturing `stream`: the work enqueued on it is recorded, not
  // run, until StreamEndCapture. The capture is the calling thread's own
  // (CUDA's THREAD_LOCAL mode): other threads' calls (a free that
  // synchronizes the context, on the cleanup thread) neither fail nor
  // break it, and the calling thread makes no call but the captured
  // work's until it ends the capture, whatever happens.
  virtual absl::Status StreamBeginCapture(GpuStreamHandle stream) const = 0;
  // Ends the capture and instantiates what it recorded. The executable
  // graph belongs to the current context; it is not thread-safe (calls on
  // one must not overlap) and each launch of it runs after the previous
  // one, on whatever stream.
  virtual absl::StatusOr<GpuGraphExecHandle> StreamEndCapture(
      GpuStreamHandle stream) const = 0;
  virtual absl::Status GraphLaunch(GpuGraphExecHandle exec,
                                   GpuStreamHandle stream) const = 0;
  // A launch in flight completes first (the vendor frees it then).
  virtual absl::Status GraphExecDestroy(GpuGraphExecHandle exec) const = 0;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_DRIVER_H_
