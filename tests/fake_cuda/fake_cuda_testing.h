// Test helpers for libfakecuda.so: loads the library as the CUDA backend
// does (dlopen, then cuGetProcAddress_v2 for every entry point), offers
// bounded waits, so that no test can hang, and a fixture that holds the
// primary context of device 0.
#ifndef TESTS_FAKE_CUDA_FAKE_CUDA_TESTING_H_
#define TESTS_FAKE_CUDA_FAKE_CUDA_TESTING_H_

#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace fakecuda_test {

// X(Member, cuda_name) for the entry points the tests call.
#define FAKECUDA_TEST_ENTRY_POINTS(X)                                     \
  X(Init, cuInit)                                                         \
  X(DriverGetVersion, cuDriverGetVersion)                                 \
  X(GetErrorName, cuGetErrorName)                                         \
  X(DeviceGetCount, cuDeviceGetCount)                                     \
  X(DeviceGet, cuDeviceGet)                                               \
  X(DeviceGetName, cuDeviceGetName)                                       \
  X(DeviceTotalMem, cuDeviceTotalMem)                                     \
  X(DeviceGetAttribute, cuDeviceGetAttribute)                             \
  X(PrimaryCtxRetain, cuDevicePrimaryCtxRetain)                           \
  X(PrimaryCtxRelease, cuDevicePrimaryCtxRelease)                         \
  X(PrimaryCtxReset, cuDevicePrimaryCtxReset)                             \
  X(CtxSetCurrent, cuCtxSetCurrent)                                       \
  X(CtxGetCurrent, cuCtxGetCurrent)                                       \
  X(CtxSynchronize, cuCtxSynchronize_v2)                                  \
  X(CtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange)               \
  X(StreamCreateWithPriority, cuStreamCreateWithPriority)                 \
  X(StreamDestroy, cuStreamDestroy)                                       \
  X(StreamQuery, cuStreamQuery)                                           \
  X(StreamSynchronize, cuStreamSynchronize)                               \
  X(StreamWaitEvent, cuStreamWaitEvent)                                   \
  X(StreamWaitValue64, cuStreamWaitValue64)                               \
  X(StreamWriteValue64, cuStreamWriteValue64)                             \
  X(LaunchHostFunc, cuLaunchHostFunc)                                     \
  X(LaunchKernel, cuLaunchKernel)                                         \
  X(LaunchKernelEx, cuLaunchKernelEx)                                     \
  X(OccupancyMaxActiveBlocksPerMultiprocessor,                            \
    cuOccupancyMaxActiveBlocksPerMultiprocessor)                          \
  X(OccupancyMaxPotentialClusterSize, cuOccupancyMaxPotentialClusterSize) \
  X(EventCreate, cuEventCreate)                                           \
  X(EventDestroy, cuEventDestroy)                                         \
  X(EventRecord, cuEventRecord)                                           \
  X(EventQuery, cuEventQuery)                                             \
  X(EventSynchronize, cuEventSynchronize)                                 \
  X(EventElapsedTime, cuEventElapsedTime)                                 \
  X(MemAlloc, cuMemAlloc)                                                 \
  X(MemFree, cuMemFree)                                                   \
  X(MemAllocAsync, cuMemAllocAsync)                                       \
  X(MemFreeAsync, cuMemFreeAsync)                                         \
  X(FuncSetAttribute, cuFuncSetAttribute)                                 \
  X(MemHostAlloc, cuMemHostAlloc)                                         \
  X(MemFreeHost, cuMemFreeHost)                                           \
  X(MemHostGetDevicePointer, cuMemHostGetDevicePointer)                   \
  X(MemHostRegister, cuMemHostRegister)                                   \
  X(MemHostUnregister, cuMemHostUnregister)                               \
  X(MemGetInfo, cuMemGetInfo)                                             \
  X(MemcpyHtoDAsync, cuMemcpyHtoDAsync)                                   \
  X(MemcpyDtoHAsync, cuMemcpyDtoHAsync)                                   \
  X(MemcpyDtoDAsync, cuMemcpyDtoDAsync)                                   \
  X(MemsetD32Async, cuMemsetD32Async)                                     \
  X(ModuleLoadData, cuModuleLoadData)                                     \
  X(ModuleUnload, cuModuleUnload)                                         \
  X(ModuleGetFunction, cuModuleGetFunction)                               \
  X(FuncGetParamInfo, cuFuncGetParamInfo)                                 \
  X(FuncGetAttribute, cuFuncGetAttribute)                                 \
  X(CtxCreate, cuCtxCreate)                                               \
  X(CtxDestroy, cuCtxDestroy)                                             \
  X(CtxPopCurrent, cuCtxPopCurrent)                                       \
  X(DeviceGetDevResource, cuDeviceGetDevResource)                         \
  X(DevSmResourceSplitByCount, cuDevSmResourceSplitByCount)               \
  X(DevResourceGenerateDesc, cuDevResourceGenerateDesc)                   \
  X(GreenCtxCreate, cuGreenCtxCreate)                                     \
  X(GreenCtxDestroy, cuGreenCtxDestroy)                                   \
  X(GreenCtxStreamCreate, cuGreenCtxStreamCreate)                         \
  X(StreamBeginCapture, cuStreamBeginCapture)                             \
  X(StreamEndCapture, cuStreamEndCapture)                                 \
  X(StreamIsCapturing, cuStreamIsCapturing)                               \
  X(GraphInstantiate, cuGraphInstantiate)                                 \
  X(GraphDestroy, cuGraphDestroy)                                         \
  X(GraphExecDestroy, cuGraphExecDestroy)                                 \
  X(GraphLaunch, cuGraphLaunch)

// The driver's entry points, each with cuda.h's type for its name.
struct Api {
  void* library = nullptr;
  decltype(&cuGetProcAddress_v2) GetProcAddress = nullptr;
#define FAKECUDA_TEST_MEMBER(member, name) decltype(&name) member = nullptr;
  FAKECUDA_TEST_ENTRY_POINTS(FAKECUDA_TEST_MEMBER)
#undef FAKECUDA_TEST_MEMBER
};

// The library's path in the test's runfiles.
inline std::string LibraryPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::string relative = "tests/fake_cuda/libfakecuda.so";
  if (srcdir != nullptr) {
    const std::string path = std::string(srcdir) + "/gpustream/" + relative;
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      std::fclose(f);
      return path;
    }
  }
  return relative;
}

// Loads the library once and resolves every entry point by base name with
// cudaVersion CUDA_VERSION; aborts if any is missing. Before the first
// cuInit it defaults FAKEGPU_MEMORY_BYTES to 64 MiB and FAKEGPU_DEVICES
// to 2 (the environment may override both).
inline const Api& api() {
  static const Api* loaded = [] {
    setenv("FAKEGPU_MEMORY_BYTES", "67108864", /*overwrite=*/0);
    setenv("FAKEGPU_DEVICES", "2", /*overwrite=*/0);
    auto* a = new Api;
    a->library = dlopen(LibraryPath().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (a->library == nullptr) {
      std::fprintf(stderr, "dlopen: %s\n", dlerror());
      std::abort();
    }
    a->GetProcAddress = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(
        dlsym(a->library, "cuGetProcAddress_v2"));
    if (a->GetProcAddress == nullptr) std::abort();
#define FAKECUDA_TEST_RESOLVE(member, name)                            \
  {                                                                    \
    void* fn = nullptr;                                                \
    CUdriverProcAddressQueryResult status;                             \
    if (a->GetProcAddress(#name, &fn, CUDA_VERSION,                    \
                          CU_GET_PROC_ADDRESS_DEFAULT,                 \
                          &status) != CUDA_SUCCESS ||                  \
        fn == nullptr || status != CU_GET_PROC_ADDRESS_SUCCESS) {      \
      std::fprintf(stderr, "cuGetProcAddress_v2(%s) failed\n", #name); \
      std::abort();                                                    \
    }                                                                  \
    a->member = reinterpret_cast<decltype(&name)>(fn);                 \
  }
    FAKECUDA_TEST_ENTRY_POINTS(FAKECUDA_TEST_RESOLVE)
#undef FAKECUDA_TEST_RESOLVE
    return a;
  }();
  return *loaded;
}

// Polls `done` every millisecond until it is true or `timeout` passes.
inline bool Eventually(
    const std::function<bool()>& done,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// cuStreamQuery until it is not CUDA_ERROR_NOT_READY (bounded): the
// stream's final status, or CUDA_ERROR_TIMEOUT.
inline CUresult Finish(CUstream stream) {
  CUresult r = CUDA_ERROR_NOT_READY;
  Eventually([&] {
    r = api().StreamQuery(stream);
    return r != CUDA_ERROR_NOT_READY;
  });
  return r == CUDA_ERROR_NOT_READY ? CUDA_ERROR_TIMEOUT : r;
}

// Whether the stream is still busy after `ms` milliseconds.
inline bool StillBusy(CUstream stream, int ms = 50) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return api().StreamQuery(stream) == CUDA_ERROR_NOT_READY;
}

inline std::string Name(CUresult r) {
  const char* name = nullptr;
  api().GetErrorName(r, &name);
  return name != nullptr ? name : "CUresult " + std::to_string(r);
}

#define EXPECT_CU(expected, call) EXPECT_EQ(Name(expected), Name(call))
#define ASSERT_CU(expected, call) ASSERT_EQ(Name(expected), Name(call))

inline const Api& cu = api();

// A host word that device work reads and writes (pinned, mapped memory).
inline std::atomic_ref<uint64_t> Word(uint64_t* p) {
  return std::atomic_ref(*p);
}

class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(CUDA_SUCCESS, cu.Init(0));
    ASSERT_CU(CUDA_SUCCESS, cu.PrimaryCtxRetain(&ctx_, 0));
    ASSERT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(ctx_));
  }

  // Drops this test's reference: the last one destroys the context with
  // all its streams, events, memory and modules.
  void TearDown() override {
    EXPECT_CU(CUDA_SUCCESS, cu.PrimaryCtxRelease(0));
    EXPECT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(nullptr));
  }

  CUstream NewStream() {
    CUstream s = nullptr;
    EXPECT_CU(CUDA_SUCCESS,
              cu.StreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0));
    return s;
  }

  CUdeviceptr Alloc(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_CU(CUDA_SUCCESS, cu.MemAlloc(&p, bytes));
    return p;
  }

  // `count` zeroed elements of pinned, mapped memory and their device
  // address.
  template <class T>
  T* Pinned(size_t count, CUdeviceptr* device = nullptr) {
    void* p = nullptr;
    EXPECT_CU(CUDA_SUCCESS, cu.MemHostAlloc(&p, count * sizeof(T),
                                            CU_MEMHOSTALLOC_DEVICEMAP));
    std::memset(p, 0, count * sizeof(T));
    if (device != nullptr) {
      EXPECT_CU(CUDA_SUCCESS, cu.MemHostGetDevicePointer(device, p, 0));
    }
    return static_cast<T*>(p);
  }

  // A module of all the samples kernels (as a text image naming them).
  CUfunction Kernel(const char* name) {
    if (samples_ == nullptr) {
      const char image[] =
          "fill_u32 vector_add_f32 saxpy_f32 add_u64 spin_ns noop trap "
          "block_rank_u32 grid_barrier_u32";
      EXPECT_CU(CUDA_SUCCESS, cu.ModuleLoadData(&samples_, image));
    }
    CUfunction f = nullptr;
    EXPECT_CU(CUDA_SUCCESS, cu.ModuleGetFunction(&f, samples_, name));
    return f;
  }

  // Launches `f` with `grid` x `block` threads (x only) and the arguments,
  // which must have the kernel's parameter types exactly.
  template <class... Args>
  CUresult Launch(CUfunction f, unsigned grid, unsigned block, CUstream s,
                  Args... args) {
    void* params[] = {&args..., nullptr};
    return cu.LaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, params, nullptr);
  }

  CUcontext ctx_ = nullptr;
  CUmodule samples_ = nullptr;
};

}  // namespace fakecuda_test

#endif  // TESTS_FAKE_CUDA_FAKE_CUDA_TESTING_H_
