// libfakehip.so: the emulated GPU of //tests/fake_gpu served as HIP's runtime
// (libamdhip64): the plain hip* symbols a client dlsyms, each translated to
// the emulation's entry point, with HIP's differences modelled where they
// matter to a client:
// - images are AMD code objects or clang offload bundles, loaded only with
//   code for the device's architecture (FAKEHIP_ARCH, default gfx90a);
// - a fault of device work aborts the process, as ROCm 5.2's runtime does
//   (FAKEHIP_FAULT_ABORTS, default 1; 0 makes it the context's sticky
//   error, as with CUDA);
// - hipDevicePrimaryCtxReset is a no-op (ROCm 5.2; see its knob below);
// - streams share GPU_MAX_HW_QUEUES hardware queues (default 4);
// - stream priorities range from 1 (least) to -1 (greatest).
// Every hazard of the emulation (shared hardware queues, synchronizing
// frees, page-granular faults, handles after a reset, host-function rules)
// holds as it does for libfakecuda; the FAKEGPU_* knobs apply.
//
// The exported signatures are the ones server/backend/hip/hip_api.h
// declares, which hip_api_check.cc proves against HIP's headers.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>

#include "server/backend/hip/hip_api.h"
#include "tests/fake_gpu/fake_context.h"
#include "tests/fake_gpu/fake_gpu.h"

namespace {

namespace api = gpustream::backend::hipapi;
using api::Error;

namespace gpu = fakegpu;

// The emulation's flags are HIP's.
static_assert(gpu::kStreamNonBlocking == api::kStreamNonBlocking);
static_assert(gpu::kEventDisableTiming == api::kEventDisableTiming);
static_assert(gpu::kHostAllocPortable == api::kHostMallocPortable);
static_assert(gpu::kHostAllocDevicemap == api::kHostMallocMapped);
static_assert(gpu::kHostRegisterDevicemap == api::kHostRegisterMapped);

Error ToHip(gpu::Result r) {
  switch (r) {
    case gpu::Result::kSuccess:
      return api::kSuccess;
    case gpu::Result::kInvalidValue:
      return api::kErrorInvalidValue;
    case gpu::Result::kOutOfMemory:
      return api::kErrorOutOfMemory;
    case gpu::Result::kNotInitialized:
      return api::kErrorNotInitialized;
    case gpu::Result::kNoDevice:
      return api::kErrorNoDevice;
    case gpu::Result::kInvalidDevice:
      return api::kErrorInvalidDevice;
    case gpu::Result::kInvalidImage:
      return api::kErrorInvalidImage;
    case gpu::Result::kInvalidContext:
      return api::kErrorInvalidContext;
    case gpu::Result::kInvalidHandle:
      return api::kErrorInvalidHandle;
    case gpu::Result::kNotFound:
      return api::kErrorNotFound;
    case gpu::Result::kNotReady:
      return api::kErrorNotReady;
    case gpu::Result::kNotSupported:
      return api::kErrorNotSupported;
    case gpu::Result::kContextIsDestroyed:
      return api::kErrorContextIsDestroyed;
    case gpu::Result::kLaunchOutOfResources:
      return api::kErrorLaunchOutOfResources;
    // HIP has no green contexts, clusters or module cooperative launches;
    // its skin never asks for them.
    case gpu::Result::kCooperativeLaunchTooLarge:
    case gpu::Result::kInvalidClusterSize:
    case gpu::Result::kInvalidResourceConfiguration:
      return api::kErrorInvalidValue;
    case gpu::Result::kStreamCaptureUnsupported:
      return api::kErrorStreamCaptureUnsupported;
    case gpu::Result::kStreamCaptureInvalidated:
      return api::kErrorStreamCaptureInvalidated;
    case gpu::Result::kStreamCaptureWrongThread:
      return api::kErrorStreamCaptureWrongThread;
    case gpu::Result::kIllegalState:
      return api::kErrorIllegalState;
    case gpu::Result::kHostMemoryAlreadyRegistered:
      return api::kErrorHostMemoryAlreadyRegistered;
    case gpu::Result::kHostMemoryNotRegistered:
      return api::kErrorHostMemoryNotRegistered;
    case gpu::Result::kIllegalAddress:
      return api::kErrorIllegalAddress;
    // HIP has no code for these faults: its launch failure.
    case gpu::Result::kMisalignedAddress:
    case gpu::Result::kLaunchFailed:
      return api::kErrorLaunchFailure;
  }
  return api::kErrorRuntimeOther;
}

struct Arch {
  const char* name;
  uint32_t mach;  // EF_AMDGPU_MACH_AMDGCN_*: the low byte of e_flags.
};
constexpr Arch kArchs[] = {
    {"gfx908", 0x30}, {"gfx90a", 0x3f}, {"gfx1030", 0x36}, {"gfx942", 0x4c}};

// The emulated device's architecture (FAKEHIP_ARCH, default gfx90a), as
// gcnArchName spells it with its feature flags.
std::string ArchName() {
  const char* arch = std::getenv("FAKEHIP_ARCH");
  return arch != nullptr && *arch != '\0' ? arch : "gfx90a";
}
std::string Processor() {
  std::string arch = ArchName();
  return arch.substr(0, arch.find(':'));
}

template <typename T>
bool ReadAt(std::string_view data, uint64_t offset, T* out) {
  if (offset > data.size() || data.size() - offset < sizeof(T)) return false;
  std::memcpy(out, data.data() + offset, sizeof(T));
  return true;
}

// The size of an AMDGPU ELF starting at `image`, as ROCm computes it (the
// end of the section table or of the furthest section: sh_offset, plus
// sh_size unless SHT_NOBITS, stepping 64 bytes a section), if its machine
// is the device's; 0 otherwise. `limit` bounds reads.
uint64_t ElfFor(const char* image, uint64_t limit, bool* wrong_arch) {
  std::string_view data(image, limit);
  uint16_t machine = 0, sections = 0;
  uint32_t flags = 0;
  uint64_t table = 0;
  if (data.substr(0, 4) !=
          "\x7f"
          "ELF" ||
      !ReadAt(data, 18, &machine) || machine != 224 ||
      !ReadAt(data, 48, &flags) || !ReadAt(data, 40, &table) ||
      !ReadAt(data, 60, &sections)) {
    return 0;
  }
  uint32_t want = 0;
  for (const Arch& a : kArchs) {
    if (Processor() == a.name) want = a.mach;
  }
  if ((flags & 0xff) != want) {
    *wrong_arch = true;
    return 0;
  }
  uint64_t size = table + uint64_t{sections} * 64;
  uint64_t furthest = 0, furthest_end = 0;
  for (uint16_t i = 0; i < sections; ++i) {
    uint32_t type = 0;
    uint64_t offset = 0, bytes = 0;
    ReadAt(data, table + uint64_t{i} * 64 + 4, &type);
    ReadAt(data, table + uint64_t{i} * 64 + 24, &offset);
    ReadAt(data, table + uint64_t{i} * 64 + 32, &bytes);
    if (offset >= furthest) {
      furthest = offset;
      furthest_end = offset + (type == 8 ? 0 : bytes);
    }
  }
  return std::max(size, furthest_end);
}

// The code object in `image` for the device: `image` itself if it is an
// AMDGPU ELF, else its offload bundle's entry for the device's processor.
// hipErrorNoBinaryForGpu when there is none (or the ELF is for another
// architecture), hipErrorInvalidImage for anything else. Like the runtime,
// trusts the headers to describe a buffer that holds them.
Error CodeObjectFor(const void* image, const char** code, uint64_t* size) {
  const char* bytes = static_cast<const char*>(image);
  constexpr uint64_t kUnbounded = uint64_t{1} << 40;
  bool wrong_arch = false;
  if (uint64_t n = ElfFor(bytes, kUnbounded, &wrong_arch); n != 0) {
    *code = bytes;
    *size = n;
    return api::kSuccess;
  }
  if (wrong_arch) return api::kErrorNoBinaryForGpu;
  constexpr std::string_view kMagic = "__CLANG_OFFLOAD_BUNDLE__";
  std::string_view data(bytes, kUnbounded);
  if (data.substr(0, kMagic.size()) != kMagic) return api::kErrorInvalidImage;
  uint64_t count = 0;
  ReadAt(data, kMagic.size(), &count);
  uint64_t at = kMagic.size() + 8;
  for (uint64_t i = 0; i < count && i < 4096; ++i) {
    uint64_t offset = 0, entry_size = 0, triple_size = 0;
    ReadAt(data, at, &offset);
    ReadAt(data, at + 8, &entry_size);
    ReadAt(data, at + 16, &triple_size);
    if (triple_size > 4096) return api::kErrorInvalidImage;
    std::string_view triple(bytes + at + 24, triple_size);
    at += 24 + triple_size;
    const size_t dashes = triple.find("--");
    if (dashes == std::string_view::npos ||
        triple.substr(0, dashes).find("amdgcn-amd-amdhsa") ==
            std::string_view::npos) {
      continue;
    }
    std::string_view target = triple.substr(dashes + 2);
    if (target.substr(0, target.find(':')) != Processor()) continue;
    bool entry_wrong_arch = false;
    if (ElfFor(bytes + offset, entry_size, &entry_wrong_arch) == 0) {
      return entry_wrong_arch ? api::kErrorNoBinaryForGpu
                              : api::kErrorInvalidImage;
    }
    *code = bytes + offset;
    *size = entry_size;
    return api::kSuccess;
  }
  return api::kErrorNoBinaryForGpu;
}

// HIP's priorities 1 (least) .. -1 (greatest) map onto the emulation's
// 0 .. -2.
int ToGpuPriority(int priority) {
  return (priority > 1 ? 1 : priority < -1 ? -1 : priority) - 1;
}

struct Name {
  Error code;
  const char* name;
  const char* text;
};
constexpr Name kNames[] = {
    {api::kSuccess, "hipSuccess", "no error"},
    {api::kErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
    {api::kErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
    {api::kErrorNotInitialized, "hipErrorNotInitialized",
     "initialization error"},
    {api::kErrorDeinitialized, "hipErrorDeinitialized", "driver shutting down"},
    {api::kErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device"},
    {api::kErrorInvalidDevice, "hipErrorInvalidDevice",
     "invalid device ordinal"},
    {api::kErrorInvalidImage, "hipErrorInvalidImage",
     "device kernel image is invalid"},
    {api::kErrorInvalidContext, "hipErrorInvalidContext",
     "invalid device context"},
    {api::kErrorNoBinaryForGpu, "hipErrorNoBinaryForGpu",
     "no kernel image is available for execution on the device"},
    {api::kErrorInvalidHandle, "hipErrorInvalidHandle",
     "invalid resource handle"},
    {api::kErrorNotFound, "hipErrorNotFound", "named symbol not found"},
    {api::kErrorNotReady, "hipErrorNotReady", "device not ready"},
    {api::kErrorIllegalAddress, "hipErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {api::kErrorLaunchOutOfResources, "hipErrorLaunchOutOfResources",
     "too many resources requested for launch"},
    {api::kErrorLaunchTimeOut, "hipErrorLaunchTimeOut",
     "the launch timed out and was terminated"},
    {api::kErrorContextIsDestroyed, "hipErrorContextIsDestroyed",
     "context is destroyed"},
    {api::kErrorAssert, "hipErrorAssert", "device-side assert triggered"},
    {api::kErrorLaunchFailure, "hipErrorLaunchFailure",
     "unspecified launch failure"},
    {api::kErrorNotSupported, "hipErrorNotSupported",
     "operation not supported"},
    {api::kErrorUnknown, "hipErrorUnknown", "unknown error"},
    {api::kErrorRuntimeOther, "hipErrorRuntimeOther",
     "runtime call other than memory returned error"},
};

const Name* FindName(Error e) {
  for (const Name& n : kNames) {
    if (n.code == e) return &n;
  }
  return nullptr;
}

gpu::StreamHandle Gpu(api::Stream* s) {
  return gpu::HandleCast<gpu::StreamHandle>(s);
}
gpu::EventHandle Gpu(api::Event* e) {
  return gpu::HandleCast<gpu::EventHandle>(e);
}
gpu::FunctionHandle Gpu(api::Function* f) {
  return gpu::HandleCast<gpu::FunctionHandle>(f);
}
gpu::ModuleHandle Gpu(api::Module* m) {
  return gpu::HandleCast<gpu::ModuleHandle>(m);
}
gpu::DevicePtr Gpu(void* p) { return reinterpret_cast<gpu::DevicePtr>(p); }

// hipModuleLaunchKernel's `extra` markers (hip_runtime_api.h): the buffer
// markers are the emulation's, the end marker is not.
void* const kHipLaunchParamEnd = reinterpret_cast<void*>(0x03);

// hipFunction_attribute values the emulation models beyond hip_api.h's,
// and the end of the enum (driver_types.h).
constexpr int kHipFuncAttributeNumRegs = 4;
constexpr int kHipFuncAttributeMax = 10;

}  // namespace

// The exported symbols, with hip_api.h's declarations.
#define FAKEHIP_EXPORT extern "C" __attribute__((visibility("default")))

// Configures the emulation as HIP's (once: it reads its settings at the
// first init), then initializes it.
FAKEHIP_EXPORT Error hipInit(unsigned int flags) {
  static const bool skinned = [] {
    gpu::Skin skin;
    skin.library = "libfakehip";
    skin.connections_env = "GPU_MAX_HW_QUEUES";
    skin.default_connections = 4;
    const char* aborts = std::getenv("FAKEHIP_FAULT_ABORTS");
    skin.fault_aborts = aborts == nullptr || std::string_view(aborts) != "0";
    gpu::SetSkin(skin);
    return true;
  }();
  (void)skinned;
  return ToHip(gpu::Init(flags));
}

// HIP 5.2.21153, as Debian's ROCm reports itself.
FAKEHIP_EXPORT Error hipDriverGetVersion(int* version) {
  if (version == nullptr) return api::kErrorInvalidValue;
  *version = 50221153;
  return api::kSuccess;
}

FAKEHIP_EXPORT Error hipRuntimeGetVersion(int* version) {
  return hipDriverGetVersion(version);
}

FAKEHIP_EXPORT const char* hipGetErrorName(Error e) {
  const Name* n = FindName(e);
  return n != nullptr ? n->name : "hipErrorUnknown";
}

FAKEHIP_EXPORT const char* hipGetErrorString(Error e) {
  const Name* n = FindName(e);
  return n != nullptr ? n->text : "unknown error";
}

FAKEHIP_EXPORT Error hipGetDeviceCount(int* count) {
  return ToHip(gpu::DeviceGetCount(count));
}

FAKEHIP_EXPORT Error hipDeviceGet(api::Device* device, int ordinal) {
  return ToHip(gpu::DeviceGet(device, ordinal));
}

FAKEHIP_EXPORT Error hipDeviceGetName(char* name, int len, api::Device dev) {
  if (gpu::Result r = gpu::DeviceGetName(name, len, dev);
      r != gpu::Result::kSuccess) {
    return ToHip(r);
  }
  std::snprintf(name, static_cast<size_t>(len), "Fake HIP Device %d (%s)", dev,
                Processor().c_str());
  return api::kSuccess;
}

FAKEHIP_EXPORT Error hipDeviceTotalMem(size_t* bytes, api::Device dev) {
  return ToHip(gpu::DeviceTotalMem(bytes, dev));
}

FAKEHIP_EXPORT Error hipDeviceGetAttribute(int* value,
                                           api::DeviceAttribute attribute,
                                           int device) {
  // As ROCclr checks: the value pointer and the attribute, then the device.
  if (value == nullptr) return api::kErrorInvalidValue;
  const gpu::DeviceLimits& limits = gpu::kDeviceLimits;
  int answer = 0;
  switch (attribute) {
    case api::kAttrComputeCapabilityMajor:
      answer = 9;  // gfx9
      break;
    case api::kAttrMaxSharedMemoryPerBlock:
      answer = 64 * 1024;  // LDS per workgroup, no opt-in
      break;
    case api::kAttrMaxBlockDimX:
    case api::kAttrMaxBlockDimY:
    case api::kAttrMaxBlockDimZ:
      answer = limits.max_block_dim[attribute - api::kAttrMaxBlockDimX];
      break;
    case api::kAttrMaxGridDimX:
    case api::kAttrMaxGridDimY:
    case api::kAttrMaxGridDimZ:
      answer = limits.max_grid_dim[attribute - api::kAttrMaxGridDimX];
      break;
    case api::kAttrMaxThreadsPerBlock:
      answer = limits.max_threads_per_block;
      break;
    case api::kAttrMultiprocessorCount:
      answer = limits.multiprocessors;
      break;
    case api::kAttrMemoryPoolsSupported:
      answer = 1;
      break;
    case api::kAttrCanUseStreamWaitValue:
      break;  // The device's: below.
    default:
      return api::kErrorInvalidValue;
  }
  bool wait_value = false;
  if (gpu::Result r = gpu::DeviceCanWaitValue(device, &wait_value);
      r != gpu::Result::kSuccess) {
    return ToHip(r);
  }
  *value = attribute == api::kAttrCanUseStreamWaitValue ? (wait_value ? 1 : 0)
                                                        : answer;
  return api::kSuccess;
}

// Fills the name and gcnArchName; the rest reads as zeros.
FAKEHIP_EXPORT Error hipGetDeviceProperties(api::DeviceProp* prop, int device) {
  if (prop == nullptr) return api::kErrorInvalidValue;
  std::memset(prop, 0, sizeof(*prop));
  char name[256] = {};
  if (gpu::Result r = gpu::DeviceGetName(name, 255, device);
      r != gpu::Result::kSuccess) {
    return ToHip(r);
  }
  std::memcpy(prop->bytes, name, sizeof(name));
  const std::string arch = ArchName();
  std::memcpy(prop->bytes + api::DeviceProp::kGcnArchNameOffset, arch.data(),
              std::min(arch.size(), api::DeviceProp::kGcnArchNameSize - 1));
  return api::kSuccess;
}

FAKEHIP_EXPORT Error hipDevicePrimaryCtxRetain(api::Context** context,
                                               api::Device device) {
  return ToHip(gpu::DevicePrimaryCtxRetain(
      gpu::HandleCast<gpu::ContextHandle*>(context), device));
}

FAKEHIP_EXPORT Error hipDevicePrimaryCtxRelease(api::Device device) {
  return ToHip(gpu::DevicePrimaryCtxRelease(device));
}

// A no-op in ROCm 5.2: the context, its objects and its sticky error stay.
// FAKEGPU_RESET_CLEARS_STICKY=1 (with FAKEHIP_FAULT_ABORTS=0) makes it
// reset as CUDA's does, for tests that go on after a fault.
FAKEHIP_EXPORT Error hipDevicePrimaryCtxReset(api::Device device) {
  if (const char* clears = std::getenv("FAKEGPU_RESET_CLEARS_STICKY");
      clears != nullptr && std::string_view(clears) == "1") {
    return ToHip(gpu::DevicePrimaryCtxReset(device));
  }
  int count = 0;
  if (gpu::Result r = gpu::DeviceGetCount(&count); r != gpu::Result::kSuccess) {
    return ToHip(r);
  }
  return device >= 0 && device < count ? api::kSuccess
                                       : api::kErrorInvalidDevice;
}

FAKEHIP_EXPORT Error hipCtxSetCurrent(api::Context* context) {
  return ToHip(
      gpu::CtxSetCurrent(gpu::HandleCast<gpu::ContextHandle>(context)));
}

FAKEHIP_EXPORT Error hipDeviceGetStreamPriorityRange(int* least,
                                                     int* greatest) {
  if (least != nullptr) *least = 1;
  if (greatest != nullptr) *greatest = -1;
  return api::kSuccess;
}

FAKEHIP_EXPORT Error hipStreamCreateWithPriority(api::Stream** stream,
                                                 unsigned int flags,
                                                 int priority) {
  return ToHip(
      gpu::StreamCreateWithPriority(gpu::HandleCast<gpu::StreamHandle*>(stream),
                                    flags, ToGpuPriority(priority)));
}

FAKEHIP_EXPORT Error hipStreamDestroy(api::Stream* stream) {
  return ToHip(gpu::StreamDestroy(Gpu(stream)));
}

FAKEHIP_EXPORT Error hipStreamQuery(api::Stream* stream) {
  return ToHip(gpu::StreamQuery(Gpu(stream)));
}

FAKEHIP_EXPORT Error hipStreamSynchronize(api::Stream* stream) {
  return ToHip(gpu::StreamSynchronize(Gpu(stream)));
}

FAKEHIP_EXPORT Error hipStreamWaitEvent(api::Stream* stream, api::Event* event,
                                        unsigned int flags) {
  return ToHip(gpu::StreamWaitEvent(Gpu(stream), Gpu(event), flags));
}

FAKEHIP_EXPORT Error hipStreamWriteValue64(api::Stream* stream, void* ptr,
                                           uint64_t value, unsigned int flags) {
  return ToHip(gpu::StreamWriteValue64(Gpu(stream), Gpu(ptr), value, flags));
}

FAKEHIP_EXPORT Error hipEventCreateWithFlags(api::Event** event,
                                             unsigned flags) {
  return ToHip(
      gpu::EventCreate(gpu::HandleCast<gpu::EventHandle*>(event), flags));
}

FAKEHIP_EXPORT Error hipEventDestroy(api::Event* event) {
  return ToHip(gpu::EventDestroy(Gpu(event)));
}

FAKEHIP_EXPORT Error hipEventRecord(api::Event* event, api::Stream* stream) {
  return ToHip(gpu::EventRecord(Gpu(event), Gpu(stream)));
}

FAKEHIP_EXPORT Error hipEventQuery(api::Event* event) {
  return ToHip(gpu::EventQuery(Gpu(event)));
}

FAKEHIP_EXPORT Error hipEventElapsedTime(float* ms, api::Event* start,
                                         api::Event* stop) {
  return ToHip(gpu::EventElapsedTime(ms, Gpu(start), Gpu(stop)));
}

FAKEHIP_EXPORT Error hipMalloc(void** ptr, size_t size) {
  return ToHip(gpu::IntoDevicePtr(
      ptr, [&](gpu::DevicePtr* p) { return gpu::MemAlloc(p, size); }));
}

FAKEHIP_EXPORT Error hipFree(void* ptr) {
  return ToHip(gpu::MemFree(Gpu(ptr)));
}

FAKEHIP_EXPORT Error hipMallocAsync(void** ptr, size_t size,
                                    api::Stream* stream) {
  return ToHip(gpu::IntoDevicePtr(ptr, [&](gpu::DevicePtr* p) {
    return gpu::MemAllocAsync(p, size, Gpu(stream));
  }));
}

FAKEHIP_EXPORT Error hipFreeAsync(void* ptr, api::Stream* stream) {
  return ToHip(gpu::MemFreeAsync(Gpu(ptr), Gpu(stream)));
}

FAKEHIP_EXPORT Error hipHostMalloc(void** ptr, size_t size,
                                   unsigned int flags) {
  return ToHip(gpu::MemHostAlloc(ptr, size, flags));
}

FAKEHIP_EXPORT Error hipHostFree(void* ptr) {
  return ToHip(gpu::MemFreeHost(ptr));
}

// hipHostRegisterDefault (0) is "mapped and portable" in HIP.
FAKEHIP_EXPORT Error hipHostRegister(void* host_ptr, size_t size,
                                     unsigned int flags) {
  if (flags == 0) {
    flags = gpu::kHostRegisterPortable | gpu::kHostRegisterDevicemap;
  }
  return ToHip(gpu::MemHostRegister(host_ptr, size, flags));
}

FAKEHIP_EXPORT Error hipHostUnregister(void* host_ptr) {
  return ToHip(gpu::MemHostUnregister(host_ptr));
}

FAKEHIP_EXPORT Error hipHostGetDevicePointer(void** device_ptr, void* host_ptr,
                                             unsigned int flags) {
  return ToHip(gpu::IntoDevicePtr(device_ptr, [&](gpu::DevicePtr* p) {
    return gpu::MemHostGetDevicePointer(p, host_ptr, flags);
  }));
}

FAKEHIP_EXPORT Error hipMemGetInfo(size_t* free, size_t* total) {
  return ToHip(gpu::MemGetInfo(free, total));
}

FAKEHIP_EXPORT Error hipMemcpyHtoDAsync(void* dst, void* src, size_t bytes,
                                        api::Stream* stream) {
  return ToHip(gpu::MemcpyHtoDAsync(Gpu(dst), src, bytes, Gpu(stream)));
}

FAKEHIP_EXPORT Error hipMemcpyDtoHAsync(void* dst, void* src, size_t bytes,
                                        api::Stream* stream) {
  return ToHip(gpu::MemcpyDtoHAsync(dst, Gpu(src), bytes, Gpu(stream)));
}

FAKEHIP_EXPORT Error hipMemcpyDtoDAsync(void* dst, void* src, size_t bytes,
                                        api::Stream* stream) {
  return ToHip(gpu::MemcpyDtoDAsync(Gpu(dst), Gpu(src), bytes, Gpu(stream)));
}

FAKEHIP_EXPORT Error hipMemsetD32Async(void* dst, int value, size_t count,
                                       api::Stream* stream) {
  return ToHip(gpu::MemsetD32Async(Gpu(dst), static_cast<unsigned int>(value),
                                   count, Gpu(stream)));
}

FAKEHIP_EXPORT Error hipModuleLoadData(api::Module** module,
                                       const void* image) {
  if (module == nullptr || image == nullptr) return api::kErrorInvalidValue;
  const char* code = nullptr;
  uint64_t size = 0;
  if (Error e = CodeObjectFor(image, &code, &size); e != api::kSuccess) {
    return e;
  }
  return ToHip(gpu::ModuleLoadTwins(
      code, size, gpu::HandleCast<gpu::ModuleHandle*>(module)));
}

FAKEHIP_EXPORT Error hipModuleUnload(api::Module* module) {
  return ToHip(gpu::ModuleUnload(Gpu(module)));
}

FAKEHIP_EXPORT Error hipModuleGetFunction(api::Function** function,
                                          api::Module* module,
                                          const char* name) {
  if (function == nullptr) return api::kErrorInvalidValue;
  gpu::FunctionHandle fn = nullptr;
  if (gpu::Result r = gpu::ModuleGetFunction(&fn, Gpu(module), name);
      r != gpu::Result::kSuccess) {
    return ToHip(r);
  }
  // AMD kernels need no opt-in for dynamic LDS: any launch within the
  // workgroup's 64 KiB, less the kernel's static LDS, runs.
  int static_bytes = 0;
  gpu::FuncGetAttribute(&static_bytes, gpu::FunctionAttribute::kSharedSizeBytes,
                        fn);
  if (gpu::Result r = gpu::FuncSetAttribute(
          fn, gpu::FunctionAttribute::kMaxDynamicSharedSizeBytes,
          64 * 1024 - static_bytes);
      r != gpu::Result::kSuccess) {
    return ToHip(r);
  }
  *function = reinterpret_cast<api::Function*>(fn);
  return api::kSuccess;
}

// Attributes the emulation does not model read as 0; values outside HIP's
// enum are invalid.
FAKEHIP_EXPORT Error hipFuncGetAttribute(int* value,
                                         api::FunctionAttribute attribute,
                                         api::Function* function) {
  if (attribute < 0 || attribute >= kHipFuncAttributeMax) {
    return api::kErrorInvalidValue;
  }
  gpu::FunctionAttribute gpu_attribute = gpu::FunctionAttribute::kOther;
  if (attribute == kHipFuncAttributeNumRegs) {
    gpu_attribute = gpu::FunctionAttribute::kNumRegs;
  }
  switch (attribute) {
    case api::kFuncMaxThreadsPerBlock:
      gpu_attribute = gpu::FunctionAttribute::kMaxThreadsPerBlock;
      break;
    case api::kFuncSharedSizeBytes:
      gpu_attribute = gpu::FunctionAttribute::kSharedSizeBytes;
      break;
    case api::kFuncMaxDynamicSharedSizeBytes:
      gpu_attribute = gpu::FunctionAttribute::kMaxDynamicSharedSizeBytes;
      break;
    default:
      break;
  }
  return ToHip(gpu::FuncGetAttribute(value, gpu_attribute, Gpu(function)));
}

FAKEHIP_EXPORT Error hipModuleLaunchKernel(
    api::Function* function, unsigned int grid_x, unsigned int grid_y,
    unsigned int grid_z, unsigned int block_x, unsigned int block_y,
    unsigned int block_z, unsigned int shared_bytes, api::Stream* stream,
    void** params, void** extra) {
  // HIP ends `extra` with HIP_LAUNCH_PARAM_END (0x03): translate the list
  // (pairs of a marker and a value) into the emulation's.
  void* translated[16];
  if (extra != nullptr) {
    size_t n = 0;
    for (; extra[n] != kHipLaunchParamEnd; n += 2) {
      if (n + 3 > std::size(translated)) return api::kErrorInvalidValue;
      translated[n] = extra[n];
      translated[n + 1] = extra[n + 1];
    }
    translated[n] = gpu::kLaunchParamEnd;
    extra = translated;
  }
  return ToHip(gpu::LaunchKernel(Gpu(function), grid_x, grid_y, grid_z, block_x,
                                 block_y, block_z, shared_bytes, Gpu(stream),
                                 params, extra));
}

// Not a HIP symbol: the emulation's count of kernel accesses that landed
// outside their allocation (fakegpu::StrayAccesses), for tests.
// Stream capture and graphs: the emulation's (fake_gpu.h), with HIP's
// codes. hipGraphInstantiate's error node and log are not written.
FAKEHIP_EXPORT Error hipStreamBeginCapture(api::Stream* stream,
                                           api::StreamCaptureMode mode) {
  static_assert(api::kCaptureModeGlobal == gpu::kCaptureModeGlobal);
  static_assert(api::kCaptureModeThreadLocal == gpu::kCaptureModeThreadLocal);
  static_assert(api::kCaptureModeRelaxed == gpu::kCaptureModeRelaxed);
  return ToHip(gpu::StreamBeginCapture(Gpu(stream), static_cast<int>(mode)));
}

FAKEHIP_EXPORT Error hipStreamEndCapture(api::Stream* stream,
                                         api::Graph** graph) {
  return ToHip(gpu::StreamEndCapture(
      Gpu(stream), gpu::HandleCast<gpu::GraphHandle*>(graph)));
}

FAKEHIP_EXPORT Error hipGraphInstantiate(api::GraphExec** exec,
                                         api::Graph* graph, api::GraphNode**,
                                         char*, size_t) {
  return ToHip(
      gpu::GraphInstantiate(gpu::HandleCast<gpu::GraphExecHandle*>(exec),
                            gpu::HandleCast<gpu::GraphHandle>(graph)));
}

FAKEHIP_EXPORT Error hipGraphDestroy(api::Graph* graph) {
  return ToHip(gpu::GraphDestroy(gpu::HandleCast<gpu::GraphHandle>(graph)));
}

FAKEHIP_EXPORT Error hipGraphExecDestroy(api::GraphExec* exec) {
  return ToHip(
      gpu::GraphExecDestroy(gpu::HandleCast<gpu::GraphExecHandle>(exec)));
}

FAKEHIP_EXPORT Error hipGraphLaunch(api::GraphExec* exec, api::Stream* stream) {
  return ToHip(gpu::GraphLaunch(gpu::HandleCast<gpu::GraphExecHandle>(exec),
                                Gpu(stream)));
}

FAKEHIP_EXPORT uint64_t fakegpu_graph_launches() {
  return gpu::GraphLaunches();
}

FAKEHIP_EXPORT uint64_t fakegpu_stray_accesses() {
  return gpu::StrayAccesses();
}
