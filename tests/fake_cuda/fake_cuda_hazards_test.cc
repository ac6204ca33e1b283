// Self-tests of the hazards libfakecuda.so models because a real driver has
// them (README.md, "Hazards"): shared hardware queues, synchronizing frees,
// stream-ordered pool memory, sticky errors that survive a reset, handles
// used after a reset, host-function rules, the driver version and module
// images without code for the device's architecture. This
// binary runs with CUDA_DEVICE_MAX_CONNECTIONS=2 and every hazard on.
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fake_cuda/fake_cuda_testing.h"

namespace fakecuda_test {
namespace {

using std::chrono::milliseconds;

class FakeCudaHazardsTest : public FakeCudaTest {
 protected:
  static void SetUpTestSuite() {
    // Death tests re-run this binary for the one test: threads are safe.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }

  // A pinned word and a stream parked on it until the word is 1.
  CUstream Parked(uint64_t** word) {
    CUdeviceptr dev;
    *word = Pinned<uint64_t>(1, &dev);
    const CUstream s = NewStream();
    EXPECT_CU(CUDA_SUCCESS,
              cu.StreamWaitValue64(s, dev, 1, CU_STREAM_WAIT_VALUE_EQ));
    return s;
  }
};

// Streams 0 and 2 share connection 0 of 2: a wait parked at its head holds
// up stream 2's launch, while stream 1 (connection 1) runs.
TEST_F(FakeCudaHazardsTest, AParkedWaitBlocksItsConnection) {
  uint64_t* word;
  const CUstream parked = Parked(&word);
  const CUstream other_connection = NewStream();
  const CUstream same_connection = NewStream();
  const CUdeviceptr a = Alloc(64), b = Alloc(64);
  const CUfunction fill = Kernel("fill_u32");
  ASSERT_CU(CUDA_SUCCESS,
            Launch(fill, 1, 16, same_connection, a, 7u, uint64_t{16}));
  ASSERT_CU(CUDA_SUCCESS,
            Launch(fill, 1, 16, other_connection, b, 8u, uint64_t{16}));
  EXPECT_CU(CUDA_SUCCESS, Finish(other_connection));
  EXPECT_TRUE(StillBusy(same_connection, 100));
  Word(word).store(1);
  EXPECT_CU(CUDA_SUCCESS, Finish(same_connection));
  EXPECT_CU(CUDA_SUCCESS, Finish(parked));
  uint32_t out[16] = {};
  ASSERT_CU(CUDA_SUCCESS,
            cu.MemcpyDtoHAsync(out, a, sizeof(out), same_connection));
  EXPECT_EQ(7u, out[15]);
}

// cuMemFree returns only once every stream of the context is idle; the
// stream-ordered cuMemFreeAsync does not wait.
TEST_F(FakeCudaHazardsTest, FreeSynchronizesTheContextFreeAsyncDoesNot) {
  uint64_t* word;
  const CUstream parked = Parked(&word);
  const CUstream free_stream = NewStream();  // connection 1
  const CUdeviceptr classic = Alloc(256);
  CUdeviceptr pooled = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.MemAllocAsync(&pooled, 256, free_stream));
  std::atomic<bool> freed{false};
  std::thread freer([&] {
    ASSERT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(ctx_));
    EXPECT_CU(CUDA_SUCCESS, cu.MemFree(classic));
    freed.store(true);
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(freed.load()) << "cuMemFree returned while a stream was busy";
  ASSERT_CU(CUDA_SUCCESS, cu.MemFreeAsync(pooled, free_stream));
  EXPECT_CU(CUDA_SUCCESS, Finish(free_stream));
  EXPECT_FALSE(freed.load());
  Word(word).store(1);
  EXPECT_TRUE(Eventually([&] { return freed.load(); }));
  freer.join();
  EXPECT_CU(CUDA_SUCCESS, Finish(parked));
}

// Pool memory is usable only in stream order after its allocation: another
// stream that touches it before the allocating stream got there faults.
TEST_F(FakeCudaHazardsTest, PoolMemoryBeforeItsAllocationFaults) {
  EXPECT_EXIT(
      {
        uint64_t* word;
        const CUstream parked = Parked(&word);
        const CUstream other = NewStream();
        CUdeviceptr p = 0;
        if (cu.MemAllocAsync(&p, 64, parked) != CUDA_SUCCESS) std::_Exit(2);
        if (Launch(Kernel("fill_u32"), 1, 16, other, p, 1u, uint64_t{16}) !=
            CUDA_SUCCESS) {
          std::_Exit(3);
        }
        std::_Exit(Finish(other) == CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "");
}

// Memory is mapped per 2 MiB granule, not per allocation: a write past the
// end of one allocation lands silently in the next; only a write into a
// granule that holds no allocation faults.
TEST_F(FakeCudaHazardsTest, WritesFaultPerGranuleNotPerAllocation) {
  const CUstream s = NewStream();
  const CUdeviceptr a = Alloc(256), b = Alloc(256);
  ASSERT_EQ(b, a + 256) << "allocations lie next to each other";
  const CUfunction fill = Kernel("fill_u32");
  // 128 elements into a's 64: no fault, and b holds the rest; the fake
  // counts the stray access (what fuzz invariants watch).
  using StrayFn = uint64_t (*)();
  const auto strays =
      reinterpret_cast<StrayFn>(dlsym(cu.library, "fakegpu_stray_accesses"));
  ASSERT_NE(strays, nullptr);
  const uint64_t strays_before = strays();
  ASSERT_CU(CUDA_SUCCESS, Launch(fill, 1, 128, s, a, 7u, uint64_t{128}));
  ASSERT_CU(CUDA_SUCCESS, Finish(s));
  EXPECT_EQ(strays(), strays_before + 1);
  uint32_t seen[64] = {};
  ASSERT_CU(CUDA_SUCCESS, cu.MemcpyDtoHAsync(seen, b, sizeof(seen), s));
  EXPECT_EQ(7u, seen[0]);
  EXPECT_EQ(7u, seen[63]);
  EXPECT_EXIT(
      {
        // 4 MiB from a: into granules that hold nothing.
        Launch(fill, 4096, 256, s, a, 1u, uint64_t{1} << 20);
        std::_Exit(Finish(s) == CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : 2);
      },
      ::testing::ExitedWithCode(0), "");
}

// A fault is sticky for the process: a reset does not clear it (the knob
// FAKEGPU_RESET_CLEARS_STICKY=1, as fake_cuda_test runs, does).
TEST_F(FakeCudaHazardsTest, StickyErrorSurvivesReset) {
  EXPECT_EXIT(
      {
        const CUstream s = NewStream();
        Launch(Kernel("trap"), 1, 1, s);
        if (Finish(s) != CUDA_ERROR_LAUNCH_FAILED) std::_Exit(2);
        if (cu.PrimaryCtxReset(0) != CUDA_SUCCESS) std::_Exit(3);
        CUcontext fresh;
        if (cu.PrimaryCtxRetain(&fresh, 0) != CUDA_SUCCESS) std::_Exit(4);
        if (cu.CtxSetCurrent(fresh) != CUDA_SUCCESS) std::_Exit(5);
        CUdeviceptr p;
        std::_Exit(cu.MemAlloc(&p, 64) == CUDA_ERROR_LAUNCH_FAILED ? 0 : 6);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(FakeCudaHazardsTest, AHandleUsedAfterResetAborts) {
  EXPECT_DEATH(
      {
        const CUstream s = NewStream();
        cu.PrimaryCtxReset(0);
        CUcontext fresh;
        cu.PrimaryCtxRetain(&fresh, 0);
        cu.CtxSetCurrent(fresh);
        cu.StreamQuery(s);
      },
      "driver misuse: a handle used after its context was reset");
}

void CallsTheDriver(void*) {
  int count;
  api().DeviceGetCount(&count);
}

TEST_F(FakeCudaHazardsTest, ADriverCallInAHostFunctionAborts) {
  EXPECT_DEATH(
      {
        const CUstream s = NewStream();
        cu.LaunchHostFunc(s, &CallsTheDriver, nullptr);
        Finish(s);
      },
      "driver misuse: a driver call from inside a host function");
}

struct ThreadLog {
  std::mutex mu;
  std::vector<std::thread::id> ids;
};

void LogThread(void* user_data) {
  auto* log = static_cast<ThreadLog*>(user_data);
  std::lock_guard<std::mutex> lock(log->mu);
  log->ids.push_back(std::this_thread::get_id());
}

TEST_F(FakeCudaHazardsTest, HostFunctionsOfAllStreamsRunOnOneThread) {
  ThreadLog log;
  std::vector<CUstream> streams = {NewStream(), NewStream(), NewStream()};
  for (CUstream s : streams) {
    ASSERT_CU(CUDA_SUCCESS, cu.LaunchHostFunc(s, &LogThread, &log));
  }
  for (CUstream s : streams) ASSERT_CU(CUDA_SUCCESS, Finish(s));
  std::lock_guard<std::mutex> lock(log.mu);
  ASSERT_EQ(3u, log.ids.size());
  EXPECT_EQ(log.ids[0], log.ids[1]);
  EXPECT_EQ(log.ids[0], log.ids[2]);
  EXPECT_NE(std::this_thread::get_id(), log.ids[0]);
}

// A kernel gets 48 KiB of dynamic shared memory unless it opts in to more.
TEST_F(FakeCudaHazardsTest, DynamicSharedMemoryAbove48KiBNeedsTheOptIn) {
  const CUstream s = NewStream();
  const CUfunction noop = Kernel("noop");
  EXPECT_CU(
      CUDA_ERROR_INVALID_VALUE,
      cu.LaunchKernel(noop, 1, 1, 1, 1, 1, 1, 64 << 10, s, nullptr, nullptr));
  ASSERT_CU(CUDA_SUCCESS,
            cu.FuncSetAttribute(
                noop, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232448));
  EXPECT_CU(CUDA_SUCCESS, cu.LaunchKernel(noop, 1, 1, 1, 1, 1, 1, 64 << 10, s,
                                          nullptr, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.FuncSetAttribute(
                noop, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232449));
  EXPECT_CU(CUDA_SUCCESS, Finish(s));
}

// cuda.h: a cudaVersion above the driver's is CUDA_ERROR_INVALID_VALUE.
TEST_F(FakeCudaHazardsTest, ProcAddressAboveTheDriverVersionIsInvalid) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.GetProcAddress("cuMemAlloc", &fn, CUDA_VERSION + 10,
                              CU_GET_PROC_ADDRESS_DEFAULT, &found));
  setenv("FAKECUDA_DRIVER_VERSION", "12080", 1);
  int version = 0;
  EXPECT_CU(CUDA_SUCCESS, cu.DriverGetVersion(&version));
  EXPECT_EQ(12080, version);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.GetProcAddress("cuMemAlloc", &fn, 13000,
                              CU_GET_PROC_ADDRESS_DEFAULT, &found));
  EXPECT_CU(CUDA_SUCCESS,
            cu.GetProcAddress("cuMemAlloc", &fn, 12080,
                              CU_GET_PROC_ADDRESS_DEFAULT, &found));
  EXPECT_NE(nullptr, fn);
  unsetenv("FAKECUDA_DRIVER_VERSION");
}

// Module images laid out as nvcc writes them, holding only the kernel name
// `noop` as code. A fatbin: a 16-byte header (magic, version, header size,
// payload size), then per entry a 64-byte header (kind: 1 PTX, 2 SASS;
// header size; payload size; architecture at byte 28) and its payload.
std::string Fatbin(
    std::initializer_list<std::pair<uint16_t, uint32_t>> entries) {
  const std::string payload("noop\0\0\0\0", 8);
  std::string body;
  for (const auto& [kind, arch] : entries) {
    std::string header(64, '\0');
    const uint32_t header_size = 64;
    const uint64_t payload_size = payload.size();
    std::memcpy(&header[0], &kind, 2);
    std::memcpy(&header[4], &header_size, 4);
    std::memcpy(&header[8], &payload_size, 8);
    std::memcpy(&header[28], &arch, 4);
    body += header + payload;
  }
  std::string image(16, '\0');
  const uint32_t magic = 0xBA55ED50;
  const uint16_t version = 1, size = 16;
  const uint64_t body_size = body.size();
  std::memcpy(&image[0], &magic, 4);
  std::memcpy(&image[4], &version, 2);
  std::memcpy(&image[6], &size, 2);
  std::memcpy(&image[8], &body_size, 8);
  return image + body;
}

// A cubin: a 64-bit ELF header (ABI version 8: the SM in e_flags bits
// 8..15) and one section holding the name.
std::string Cubin(uint32_t arch) {
  std::string image(64 + 64 + 8, '\0');
  const char ident[] = {0x7F, 'E', 'L', 'F', 2, 1, 1, 0x41, 8};
  std::memcpy(&image[0], ident, sizeof(ident));
  const uint64_t shoff = 64, section_offset = 128, section_size = 8;
  const uint32_t flags = (arch << 8) | 0x04;
  const uint16_t shentsize = 64, shnum = 1;
  std::memcpy(&image[0x28], &shoff, 8);
  std::memcpy(&image[0x30], &flags, 4);
  std::memcpy(&image[0x3A], &shentsize, 2);
  std::memcpy(&image[0x3C], &shnum, 2);
  const uint32_t progbits = 1;
  std::memcpy(&image[64 + 4], &progbits, 4);
  std::memcpy(&image[64 + 0x18], &section_offset, 8);
  std::memcpy(&image[64 + 0x20], &section_size, 8);
  std::memcpy(&image[128], "noop", 4);
  return image;
}

// The device is a 9.0 (an H100/H200): SASS runs only when built for 9.x
// with a minor at most 0, PTX when built for 9.0 or older (the driver
// compiles it); anything else is CUDA_ERROR_NO_BINARY_FOR_GPU (PTX text for
// a newer target: CUDA_ERROR_INVALID_PTX).
TEST_F(FakeCudaHazardsTest, ImagesWithoutCodeForTheDeviceDoNotLoad) {
  int major = 0, minor = -1;
  ASSERT_CU(CUDA_SUCCESS,
            cu.DeviceGetAttribute(
                &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  ASSERT_CU(CUDA_SUCCESS,
            cu.DeviceGetAttribute(
                &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
  ASSERT_EQ(9, major);
  ASSERT_EQ(0, minor);
  struct Case {
    std::string image;
    CUresult expected;
    const char* what;
  };
  const std::vector<Case> cases = {
      {Fatbin({{2, 80}}), CUDA_ERROR_NO_BINARY_FOR_GPU, "sm_80 SASS only"},
      {Fatbin({{2, 86}, {2, 100}}), CUDA_ERROR_NO_BINARY_FOR_GPU,
       "sm_86 and sm_100 SASS"},
      {Fatbin({{1, 100}}), CUDA_ERROR_NO_BINARY_FOR_GPU, "compute_100 PTX"},
      {Fatbin({{2, 80}, {2, 90}}), CUDA_SUCCESS, "sm_80 and sm_90 SASS"},
      {Fatbin({{2, 80}, {1, 80}}), CUDA_SUCCESS, "sm_80 SASS, compute_80 PTX"},
      {Cubin(80), CUDA_ERROR_NO_BINARY_FOR_GPU, "an sm_80 cubin"},
      {Cubin(90), CUDA_SUCCESS, "an sm_90 cubin"},
      {".version 9.0\n.target sm_100\n.entry noop()\n{ ret; }\n",
       CUDA_ERROR_INVALID_PTX, "PTX for sm_100"},
      {".version 9.0\n.target sm_80\n.entry noop()\n{ ret; }\n", CUDA_SUCCESS,
       "PTX for sm_80"},
  };
  for (const Case& c : cases) {
    CUmodule module = nullptr;
    EXPECT_CU(c.expected, cu.ModuleLoadData(&module, c.image.data())) << c.what;
    if (module != nullptr) EXPECT_CU(CUDA_SUCCESS, cu.ModuleUnload(module));
  }
}

}  // namespace
}  // namespace fakecuda_test
