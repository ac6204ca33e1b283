// The emulated GPU's entry points: a driver API in no vendor's terms, which
// the skins serve as CUDA's driver (//tests/fake_cuda:libfakecuda.so) and
// as HIP's runtime (//tests/fake_hip:libfakehip.so), translating handles,
// flags and result codes. The emulation (streams sharing hardware queues,
// events, page-granular device memory, sticky faults, kernel twins) lives
// behind these functions in this folder; the skins add only what their
// vendor does differently (README.md).
//
// Every function is thread-safe unless it says otherwise, and returns
// Result::kSuccess or the first problem it found, as a driver does.
#ifndef TESTS_FAKE_GPU_FAKE_GPU_H_
#define TESTS_FAKE_GPU_FAKE_GPU_H_

#include <pthread.h>

#include <bit>
#include <cstddef>
#include <cstdint>

// A per-thread T (value-initialized at a thread's first use, deleted when
// the thread exits) kept in POSIX thread-specific data rather than C++
// thread_local. The library is dlopen'ed: its dynamic TLS would be reached
// through __tls_get_addr, where GCC 12's ThreadSanitizer mis-sizes a new
// thread's block on this glibc (the process dies "ThreadSanitizer failed
// to allocate" in whichever thread first touches it), and initial-exec TLS
// in a dlopen'ed library depends on the loader initializing it for threads
// already running. Keys are never deleted: the driver library is never
// unloaded once a thread has used it.
template <typename T>
T& PerThread() {
  static const pthread_key_t key = [] {
    pthread_key_t k;
    pthread_key_create(&k, [](void* p) { delete static_cast<T*>(p); });
    return k;
  }();
  auto* value = static_cast<T*>(pthread_getspecific(key));
  if (value == nullptr) {
    value = new T();
    pthread_setspecific(key, value);
  }
  return *value;
}

namespace fakegpu {

// What an entry point returns. The skins map each to their vendor's code.
enum class Result {
  kSuccess,
  kInvalidValue,
  kOutOfMemory,
  kNotInitialized,
  kNoDevice,
  kInvalidDevice,
  kInvalidImage,
  kInvalidContext,
  kInvalidHandle,
  kNotFound,
  kNotReady,
  kNotSupported,
  kContextIsDestroyed,
  kLaunchOutOfResources,
  // A cooperative grid larger than the device holds resident at once.
  kCooperativeLaunchTooLarge,
  // A cluster the launch cannot have (grid not a multiple of it, too many
  // blocks for the function).
  kInvalidClusterSize,
  // An SM split or resource descriptor the device cannot make.
  kInvalidResourceConfiguration,
  // Stream capture (fake_graph.cc): a call capture does not allow (it
  // also invalidates the capture), one on a capture already invalidated,
  // EndCapture from a thread that did not begin it, and BeginCapture on a
  // stream that is capturing already.
  kStreamCaptureUnsupported,
  kStreamCaptureInvalidated,
  kStreamCaptureWrongThread,
  kIllegalState,
  // MemHostRegister of a range that overlaps registered or pinned memory;
  // MemHostUnregister of an address no registration starts at.
  kHostMemoryAlreadyRegistered,
  kHostMemoryNotRegistered,
  // Faults of device work: sticky for the context (Context::Fault).
  kIllegalAddress,
  kMisalignedAddress,
  kLaunchFailed,
};

// The result's name as the enumerator spells it ("kIllegalAddress").
const char* ResultName(Result result);

// Opaque handles: tokens naming objects in the emulation's registries
// (fake_registry.h), never pointers, never reused.
typedef struct ContextHandle_* ContextHandle;
typedef struct StreamHandle_* StreamHandle;
typedef struct EventHandle_* EventHandle;
typedef struct ModuleHandle_* ModuleHandle;
typedef struct FunctionHandle_* FunctionHandle;
typedef struct GreenCtxHandle_* GreenCtxHandle;
typedef struct ResourceDescHandle_* ResourceDescHandle;
typedef struct GraphHandle_* GraphHandle;
typedef struct GraphExecHandle_* GraphExecHandle;
// A device address; the host address of the same bytes (unified
// addressing).
using DevicePtr = uint64_t;
using HostFn = void (*)(void* data);

// For the skins: a vendor's handle (CUstream, hipStream_t, and pointers to
// them) is the emulation's token, reinterpreted.
template <class To, class From>
To HandleCast(From from) {
  static_assert(sizeof(To) == sizeof(From));
  return reinterpret_cast<To>(from);
}

// For the skins: calls `call` with a DevicePtr* and stores what it wrote in
// *out, a vendor's device pointer of the same size (CUdeviceptr, void*),
// only on success; a null `out` is passed on as null.
template <class Out, class Call>
Result IntoDevicePtr(Out* out, Call call) {
  if (out == nullptr) return call(nullptr);
  DevicePtr ptr = 0;
  const Result r = call(&ptr);
  if (r == Result::kSuccess) *out = std::bit_cast<Out>(ptr);
  return r;
}

// Flags, each with the meaning (and, as it happens, the bit) that CUDA and
// HIP give theirs; the skins check that with static_assert.
inline constexpr unsigned kStreamNonBlocking = 0x1;
inline constexpr unsigned kEventBlockingSync = 0x1;
inline constexpr unsigned kEventDisableTiming = 0x2;
inline constexpr unsigned kEventInterprocess = 0x4;
inline constexpr unsigned kHostAllocPortable = 0x1;
inline constexpr unsigned kHostAllocDevicemap = 0x2;
inline constexpr unsigned kHostAllocWritecombined = 0x4;
inline constexpr unsigned kHostRegisterPortable = 0x1;
inline constexpr unsigned kHostRegisterDevicemap = 0x2;
inline constexpr unsigned kHostRegisterIoMemory = 0x4;
inline constexpr unsigned kHostRegisterReadOnly = 0x8;
// StreamWaitValue64's comparisons (the low bits) and flush flag.
inline constexpr unsigned kWaitValueGeq = 0x0;
inline constexpr unsigned kWaitValueEq = 0x1;
inline constexpr unsigned kWaitValueAnd = 0x2;
inline constexpr unsigned kWaitValueNor = 0x3;
inline constexpr unsigned kWaitValueFlush = 1u << 30;
inline constexpr unsigned kWriteValueDefault = 0x0;
inline constexpr unsigned kWriteValueNoMemoryBarrier = 0x1;
// LaunchKernel's `extra` list: kLaunchParamBufferPointer, buffer,
// kLaunchParamBufferSize, &size, kLaunchParamEnd.
inline void* const kLaunchParamEnd = reinterpret_cast<void*>(0x00);
inline void* const kLaunchParamBufferPointer = reinterpret_cast<void*>(0x01);
inline void* const kLaunchParamBufferSize = reinterpret_cast<void*>(0x02);

enum class FunctionAttribute {
  kMaxThreadsPerBlock,
  kSharedSizeBytes,  // static shared memory (the twins use none)
  kNumRegs,
  kMaxDynamicSharedSizeBytes,
  // 0 or 1: clusters may grow past the portable 8 blocks, to 16.
  kNonPortableClusterSizeAllowed,
  kOther,  // one the emulation does not model: reads as 0, cannot be set
};

// The modelled device's limits: an H100-class GPU.
struct DeviceLimits {
  int max_threads_per_block = 1024;
  int max_block_dim[3] = {1024, 1024, 64};
  int max_grid_dim[3] = {2147483647, 65535, 65535};
  int multiprocessors = 132;
  // SM partitions (green contexts), as on compute capability 9.0: at least
  // 8 SMs each, in multiples of 8.
  unsigned sm_min_partition = 8;
  unsigned sm_alignment = 8;
  // Dynamic shared memory per block without and with opting in.
  int shared_per_block = 49152;
  int shared_per_block_optin = 232448;
  // Residency per SM (occupancy): blocks, threads and shared memory (each
  // block also takes 1 KiB that the driver reserves).
  int max_blocks_per_sm = 32;
  int max_threads_per_sm = 2048;
  int shared_per_sm = 233472;
  int reserved_shared_per_block = 1024;
  // Blocks per cluster: portable, and with a function's opt-in.
  int portable_cluster_size = 8;
  int max_cluster_size = 16;
};
inline constexpr DeviceLimits kDeviceLimits;

// Initialization and devices. Init reads the FAKEGPU_* knobs (README.md)
// once; flags must be 0.
Result Init(unsigned int flags);
Result DeviceGetCount(int* count);
Result DeviceGet(int* device, int ordinal);
Result DeviceGetName(char* name, int len, int dev);
Result DeviceTotalMem(size_t* bytes, int dev);
// Whether StreamWaitValue64/StreamWriteValue64 are supported
// (FAKEGPU_NO_WAIT_VALUE), after CheckDevice.
Result DeviceCanWaitValue(int dev, bool* supported);

// Primary contexts; the calling thread's current context.
Result DevicePrimaryCtxRetain(ContextHandle* pctx, int dev);
Result DevicePrimaryCtxRelease(int dev);
Result DevicePrimaryCtxReset(int dev);
Result CtxSetCurrent(ContextHandle handle);
Result CtxGetCurrent(ContextHandle* pctx);
// What a call that uses the current context checks first: kInvalidContext
// if the thread has none, kContextIsDestroyed, or its sticky error.
Result CtxCheckCurrent();
Result CtxSynchronize();
Result ContextSynchronize(ContextHandle handle);
// 0 (least) .. -5 (greatest).
Result CtxGetStreamPriorityRange(int* least, int* greatest);
// A context of the caller's own on `dev` (flags 0), with its own address
// space, streams and sticky error; pushed onto the calling thread's
// context stack (current), as the driver does. CtxPopCurrent pops the
// current context (the one below becomes current). CtxDestroy destroys
// everything of it; if it is current on the calling thread it is popped.
// CtxSetCurrent replaces the top of the stack (NULL pops it).
Result CtxCreate(ContextHandle* pctx, unsigned int flags, int dev);
Result CtxPopCurrent(ContextHandle* pctx);
Result CtxDestroy(ContextHandle ctx);

// SM resources and green contexts (fake_green.cc). A resource is a set of
// a device's SMs: the whole device's, or a group of one split. A split
// makes `groups` equal groups of at least `min_count` SMs, rounded up to
// sm_min_partition and sm_alignment, and leaves the rest in `remaining`; a
// descriptor joins groups of one split; a green context runs the kernels
// of its streams on its descriptor's SMs only (a kernel of B blocks takes
// ceil(B / SMs) waves), in its device's primary context (which it retains:
// the same memory, modules and sticky error).
struct SmResource {
  unsigned sm_count = 0;
  unsigned min_partition = 0;
  unsigned alignment = 0;
  int device = -1;     // -1: not a resource any call made
  uint64_t split = 0;  // the split that made it; 0: the whole device's
};
Result DeviceGetSmResource(int dev, SmResource* resource);
// As the vendor: `result` null asks only how many groups it would make.
Result SmResourceSplitByCount(SmResource* result, unsigned* groups,
                              const SmResource* input, SmResource* remaining,
                              unsigned int flags, unsigned int min_count);
Result ResourceGenerateDesc(ResourceDescHandle* desc,
                            const SmResource* resources, unsigned count);
// `flags` must ask for the default stream (the vendor's "required" flag,
// kGreenCtxDefaultStream).
inline constexpr unsigned kGreenCtxDefaultStream = 0x1;
Result GreenCtxCreate(GreenCtxHandle* green, ResourceDescHandle desc, int dev,
                      unsigned int flags);
Result GreenCtxDestroy(GreenCtxHandle green);
// A stream of `green` (whatever context is current); flags must be
// kStreamNonBlocking.
Result GreenCtxStreamCreate(StreamHandle* stream, GreenCtxHandle green,
                            unsigned int flags, int priority);

// Streams.
Result StreamCreateWithPriority(StreamHandle* stream, unsigned int flags,
                                int priority);
Result StreamDestroy(StreamHandle stream);
Result StreamQuery(StreamHandle stream);
Result StreamSynchronize(StreamHandle stream);
Result StreamWaitEvent(StreamHandle stream, EventHandle event,
                       unsigned int flags);
Result StreamWaitValue64(StreamHandle stream, DevicePtr addr, uint64_t value,
                         unsigned int flags);
Result StreamWriteValue64(StreamHandle stream, DevicePtr addr, uint64_t value,
                          unsigned int flags);
Result LaunchHostFunc(StreamHandle stream, HostFn fn, void* data);

// Stream capture and graphs (fake_graph.cc). While a stream captures,
// the work enqueued on it is recorded instead of run: kernel launches,
// copies, memsets, value writes and waits, and host functions; anything
// else enqueued on it (event records and waits, stream-ordered
// allocation, copies that complete before they return) is refused with
// kStreamCaptureUnsupported and invalidates the capture, as are a query or
// synchronize of the capturing stream, and the potentially unsafe calls
// (MemAlloc, MemFree, MemHostAlloc, MemFreeHost, MemHostRegister,
// MemHostUnregister, CtxSynchronize) from a
// thread the capture's mode prohibits (kCaptureModeGlobal: every thread;
// kCaptureModeThreadLocal: the capturing one; kCaptureModeRelaxed: none).
// A call that synchronizes the context (CtxSynchronize, ModuleUnload, and
// MemFree, MemFreeHost and MemHostUnregister unless FAKEGPU_SYNC_FREE=0) fails
// the same way while any stream of the context captures, from any thread in any
// mode: a capturing stream cannot be synchronized. An executable graph runs its
// recorded work in order as one operation of the stream it is launched on,
// after the previous launch of the same executable, wherever that was. Graph
// objects are not thread-safe, as the vendors document: two threads calling on
// one at once is Misuse.
inline constexpr int kCaptureModeGlobal = 0;
inline constexpr int kCaptureModeThreadLocal = 1;
inline constexpr int kCaptureModeRelaxed = 2;
Result StreamBeginCapture(StreamHandle stream, int mode);
// *graph: the captured graph, or null when the capture was invalidated
// (kStreamCaptureInvalidated); the capture ends either way.
Result StreamEndCapture(StreamHandle stream, GraphHandle* graph);
Result StreamIsCapturing(StreamHandle stream, bool* capturing);
Result GraphInstantiate(GraphExecHandle* exec, GraphHandle graph);
Result GraphDestroy(GraphHandle graph);
Result GraphExecDestroy(GraphExecHandle exec);
Result GraphLaunch(GraphExecHandle exec, StreamHandle stream);
// Successful GraphLaunch calls so far, process-wide (the CUDA skin exports
// it as fakegpu_graph_launches(), for tests of who launches graphs).
uint64_t GraphLaunches();

// Events.
Result EventCreate(EventHandle* event, unsigned int flags);
Result EventDestroy(EventHandle event);
Result EventRecord(EventHandle event, StreamHandle stream);
Result EventQuery(EventHandle event);
Result EventSynchronize(EventHandle event);
Result EventElapsedTime(float* ms, EventHandle start, EventHandle end);

// Memory.
Result MemAlloc(DevicePtr* dptr, size_t bytes);
Result MemFree(DevicePtr dptr);
Result MemAllocAsync(DevicePtr* dptr, size_t bytes, StreamHandle stream);
Result MemFreeAsync(DevicePtr dptr, StreamHandle stream);
Result MemHostAlloc(void** pp, size_t bytes, unsigned int flags);
Result MemFreeHost(void* p);
Result MemHostGetDevicePointer(DevicePtr* pdptr, void* p, unsigned int flags);
// Page-locks the caller's memory [p, p + bytes) and makes it pinned memory
// of the emulation (copies, and with kHostRegisterDevicemap kernels through
// MemHostGetDevicePointer, reach it) until MemHostUnregister(p), which
// synchronizes the context as MemFreeHost does and must name the base
// address given here. The memory stays the caller's: work that touches it
// after the unregistration faults, and the caller must not unmap it
// before. kHostRegisterIoMemory and kHostRegisterReadOnly: kNotSupported
// (the emulation has no such memory).
Result MemHostRegister(void* p, size_t bytes, unsigned int flags);
Result MemHostUnregister(void* p);
Result MemGetInfo(size_t* free, size_t* total);
Result MemcpyHtoDAsync(DevicePtr dst, const void* src, size_t n,
                       StreamHandle stream);
Result MemcpyDtoHAsync(void* dst, DevicePtr src, size_t n, StreamHandle stream);
Result MemcpyDtoDAsync(DevicePtr dst, DevicePtr src, size_t n,
                       StreamHandle stream);
Result MemsetD32Async(DevicePtr dst, unsigned int value, size_t count,
                      StreamHandle stream);

// Kernel accesses so far that left the allocation they started in and
// landed, by page granularity, in other memory of the context (on a GPU:
// silently, another buffer's data). Process-wide; tests and fuzz
// invariants read it (the skins export it as fakegpu_stray_accesses()).
uint64_t StrayAccesses();

// Modules and kernels. A module is loaded from an image whose format the
// skin checked for its device: the emulation looks in it only for the names
// of kernels with CPU twins (fake_kernels.h), kInvalidImage if it names
// none.
Result ModuleLoadTwins(const char* image, size_t size, ModuleHandle* module);
Result ModuleUnload(ModuleHandle module);
Result ModuleGetFunction(FunctionHandle* function, ModuleHandle module,
                         const char* name);
Result FuncGetParamInfo(FunctionHandle function, size_t index, size_t* offset,
                        size_t* size);
Result FuncGetAttribute(int* value, FunctionAttribute attribute,
                        FunctionHandle function);
Result FuncSetAttribute(FunctionHandle function, FunctionAttribute attribute,
                        int value);
Result LaunchKernel(FunctionHandle function, unsigned int grid_x,
                    unsigned int grid_y, unsigned int grid_z,
                    unsigned int block_x, unsigned int block_y,
                    unsigned int block_z, unsigned int shared_bytes,
                    StreamHandle stream, void** params, void** extra);

// The extended launch (cuLaunchKernelEx): LaunchKernel plus thread block
// clusters (cluster all 0: none) and cooperative launches.
struct LaunchShape {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  unsigned cluster[3];
  bool cooperative;
};
Result LaunchKernelEx(FunctionHandle function, const LaunchShape& shape,
                      StreamHandle stream, void** params, void** extra);

// Occupancy: blocks of `block_size` threads and `dynamic_shared` bytes one
// SM holds resident at once (0 when the function cannot run them).
Result OccupancyMaxActiveBlocksPerMultiprocessor(int* blocks,
                                                 FunctionHandle function,
                                                 int block_size,
                                                 size_t dynamic_shared);
// The most blocks per cluster the function can launch with: the portable
// size, or more once it allows non-portable sizes.
Result OccupancyMaxPotentialClusterSize(int* size, FunctionHandle function);

}  // namespace fakegpu

#endif  // TESTS_FAKE_GPU_FAKE_GPU_H_
