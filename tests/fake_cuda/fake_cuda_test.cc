// Tests of libfakecuda.so through its only real interface: dlopen and
// cuGetProcAddress_v2, as server/backend/cuda uses it. Every wait is
// bounded (fake_cuda_testing.h), so a broken fake fails instead of hanging.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fake_cuda/fake_cuda_testing.h"

namespace fakecuda_test {
namespace {

TEST(ProcAddress, ResolvesBaseAndVersionedNamesOnly) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  ASSERT_CU(CUDA_SUCCESS,
            cu.GetProcAddress("cuMemAlloc_v2", &fn, 13000, 0, &status));
  EXPECT_EQ(reinterpret_cast<void*>(cu.MemAlloc), fn);
  EXPECT_EQ(CU_GET_PROC_ADDRESS_SUCCESS, status);
  EXPECT_CU(CUDA_ERROR_NOT_FOUND,
            cu.GetProcAddress("cuNoSuchCall", &fn, 13000, 0, &status));
  EXPECT_EQ(nullptr, fn);
  EXPECT_EQ(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, status);
  EXPECT_CU(CUDA_ERROR_NOT_FOUND,
            cu.GetProcAddress("cuFuncGetParamInfo", &fn, 12000, 0, &status));
  EXPECT_EQ(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, status);
  // As in CUDA 13's driver, "cuCtxSynchronize" at 13000 is the ABI of
  // cuCtxSynchronize_v2(CUcontext) (PFN_cuCtxSynchronize_v13000), before
  // that the one cuda.h declares.
  void* v1 = nullptr;
  ASSERT_CU(CUDA_SUCCESS,
            cu.GetProcAddress("cuCtxSynchronize", &fn, 13000, 0, &status));
  EXPECT_EQ(reinterpret_cast<void*>(cu.CtxSynchronize), fn);
  ASSERT_CU(CUDA_SUCCESS,
            cu.GetProcAddress("cuCtxSynchronize", &v1, 12080, 0, &status));
  EXPECT_NE(fn, v1);
  int version = 0;
  EXPECT_CU(CUDA_SUCCESS, cu.DriverGetVersion(&version));
  EXPECT_EQ(13000, version);
}

TEST_F(FakeCudaTest, DevicesLookLikeH100s) {
  int count = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.DeviceGetCount(&count));
  EXPECT_EQ(2, count);
  CUdevice dev;
  EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cu.DeviceGet(&dev, 2));
  char name[64];
  ASSERT_CU(CUDA_SUCCESS, cu.DeviceGetName(name, sizeof(name), 1));
  EXPECT_STREQ("Fake CUDA Device 1", name);
  size_t total = 0;
  EXPECT_CU(CUDA_SUCCESS, cu.DeviceTotalMem(&total, 0));
  EXPECT_EQ(64u << 20, total);
  auto attr = [](CUdevice_attribute a) {
    int v = -1;
    EXPECT_CU(CUDA_SUCCESS, cu.DeviceGetAttribute(&v, a, 0));
    return v;
  };
  EXPECT_EQ(9, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR));
  EXPECT_EQ(0, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  EXPECT_EQ(132, attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
  EXPECT_EQ(64, attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z));
  EXPECT_EQ(232448,
            attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  EXPECT_EQ(1, attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS));
  int least = 1, greatest = 1;
  EXPECT_CU(CUDA_SUCCESS, cu.CtxGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(0, least);
  EXPECT_EQ(-5, greatest);
}

TEST_F(FakeCudaTest, StreamRunsWorkInOrder) {
  constexpr uint64_t kCount = 1000;
  const CUstream s = NewStream();
  const CUdeviceptr buffer = Alloc(kCount * 4);
  uint32_t* host = Pinned<uint32_t>(kCount);
  // memset, then (after a delay) fill the first half, then read back.
  ASSERT_CU(CUDA_SUCCESS, cu.MemsetD32Async(buffer, 1, kCount, s));
  ASSERT_CU(CUDA_SUCCESS,
            Launch(Kernel("spin_ns"), 1, 1, s, uint64_t{20'000'000}));
  ASSERT_CU(CUDA_SUCCESS, Launch(Kernel("fill_u32"), 4, 128, s, buffer,
                                 uint32_t{7}, kCount / 2));
  ASSERT_CU(CUDA_SUCCESS, cu.MemcpyDtoHAsync(host, buffer, kCount * 4, s));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cu.StreamQuery(s));
  ASSERT_CU(CUDA_SUCCESS, Finish(s));
  for (uint64_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(i < kCount / 2 ? 7u : 1u, host[i]) << i;
  }
  // To pageable memory the copy is complete when the call returns.
  std::vector<uint32_t> pageable(kCount);
  ASSERT_CU(CUDA_SUCCESS,
            Launch(Kernel("fill_u32"), 8, 128, s, buffer, uint32_t{9}, kCount));
  ASSERT_CU(CUDA_SUCCESS,
            cu.MemcpyDtoHAsync(pageable.data(), buffer, kCount * 4, s));
  EXPECT_EQ(9u, pageable[kCount - 1]);
  EXPECT_CU(CUDA_SUCCESS, cu.StreamDestroy(s));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cu.StreamQuery(s));
}

TEST_F(FakeCudaTest, TwinsComputeTheSampleKernels) {
  constexpr uint64_t kCount = 300;
  const CUstream s = NewStream();
  const CUdeviceptr a = Alloc(kCount * 4), b = Alloc(kCount * 4),
                    c = Alloc(kCount * 4);
  std::vector<float> host(kCount);
  for (uint64_t i = 0; i < kCount; ++i) host[i] = i;
  ASSERT_CU(CUDA_SUCCESS, cu.MemcpyHtoDAsync(a, host.data(), kCount * 4, s));
  // The pageable source was staged: changing it now does not change `a`.
  for (uint64_t i = 0; i < kCount; ++i) host[i] = 2 * i;
  ASSERT_CU(CUDA_SUCCESS, cu.MemcpyHtoDAsync(b, host.data(), kCount * 4, s));
  ASSERT_CU(CUDA_SUCCESS, cu.MemsetD32Async(c, 0, kCount, s));
  // 256 threads: elements from 256 on are not computed.
  ASSERT_CU(CUDA_SUCCESS,
            Launch(Kernel("vector_add_f32"), 1, 256, s, a, b, c, kCount));
  ASSERT_CU(CUDA_SUCCESS,
            Launch(Kernel("saxpy_f32"), 2, 256, s, 0.5f, a, b, kCount));
  std::vector<float> sum(kCount), saxpy(kCount);
  ASSERT_CU(CUDA_SUCCESS, cu.MemcpyDtoHAsync(sum.data(), c, kCount * 4, s));
  ASSERT_CU(CUDA_SUCCESS, cu.MemcpyDtoHAsync(saxpy.data(), b, kCount * 4, s));
  for (uint64_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(i < 256 ? 3.0f * i : 0.0f, sum[i]) << i;
    EXPECT_EQ(2.5f * i, saxpy[i]) << i;
  }
  // Parameters as one buffer through `extra`, then a device-to-device copy.
  struct {
    CUdeviceptr out;
    uint32_t value;
    uint32_t padding;
    uint64_t n;
  } args = {c, 11, 0, kCount};
  size_t size = sizeof(args);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args,
                   CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  ASSERT_CU(CUDA_SUCCESS, cu.LaunchKernel(Kernel("fill_u32"), 2, 1, 1, 256, 1,
                                          1, 0, s, nullptr, extra));
  ASSERT_CU(CUDA_SUCCESS, cu.MemcpyDtoDAsync(a, c, kCount * 4, s));
  std::vector<uint32_t> filled(kCount);
  ASSERT_CU(CUDA_SUCCESS, cu.MemcpyDtoHAsync(filled.data(), a, kCount * 4, s));
  EXPECT_EQ(std::vector<uint32_t>(kCount, 11), filled);
  // add_u64 adds atomically from concurrent streams.
  CUdeviceptr counter_dev;
  uint64_t* counter = Pinned<uint64_t>(1, &counter_dev);
  std::vector<CUstream> streams = {NewStream(), NewStream(), NewStream()};
  for (int i = 0; i < 10; ++i) {
    for (CUstream t : streams) {
      ASSERT_CU(CUDA_SUCCESS,
                Launch(Kernel("add_u64"), 4, 64, t, counter_dev, uint64_t{2}));
    }
  }
  EXPECT_CU(CUDA_SUCCESS, cu.CtxSynchronize(nullptr));
  EXPECT_EQ(60u, Word(counter).load());
  // A misaligned access is a (sticky) fault too.
  ASSERT_CU(CUDA_SUCCESS,
            Launch(Kernel("fill_u32"), 1, 1, s, a + 2, 1u, uint64_t{1}));
  EXPECT_CU(CUDA_ERROR_MISALIGNED_ADDRESS, Finish(s));
}

TEST_F(FakeCudaTest, WaitEventBindsToTheRecordAtCallTime) {
  const CUstream a = NewStream(), b = NewStream(), c = NewStream();
  CUdeviceptr flag_dev;
  uint64_t* flag = Pinned<uint64_t>(2, &flag_dev);
  CUevent e;
  ASSERT_CU(CUDA_SUCCESS, cu.EventCreate(&e, CU_EVENT_DEFAULT));
  // A never-recorded event: no wait.
  ASSERT_CU(CUDA_SUCCESS, cu.StreamWaitEvent(b, e, 0));
  ASSERT_CU(CUDA_SUCCESS, Finish(b));
  // a is blocked on flag[0]; e records the blocked point; b waits on it.
  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamWaitValue64(a, flag_dev, 1, CU_STREAM_WAIT_VALUE_EQ));
  ASSERT_CU(CUDA_SUCCESS, cu.EventRecord(e, a));
  ASSERT_CU(CUDA_SUCCESS, cu.StreamWaitEvent(b, e, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.StreamWriteValue64(b, flag_dev + 8, 42, 0));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cu.EventQuery(e));
  // Re-recording e on an idle stream completes the new record at once...
  ASSERT_CU(CUDA_SUCCESS, cu.EventRecord(e, c));
  ASSERT_TRUE(Eventually([&] { return cu.EventQuery(e) == CUDA_SUCCESS; }));
  // ...but b still waits for the record it was bound to.
  EXPECT_TRUE(StillBusy(b));
  EXPECT_EQ(0u, Word(flag + 1).load());
  Word(flag).store(1);
  ASSERT_CU(CUDA_SUCCESS, Finish(b));
  EXPECT_EQ(42u, Word(flag + 1).load());
  EXPECT_CU(CUDA_SUCCESS, cu.EventDestroy(e));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cu.EventQuery(e));
}

TEST_F(FakeCudaTest, WaitValueEqAndGeqWithWrapAround) {
  const CUstream s = NewStream();
  CUdeviceptr word_dev;
  uint64_t* word = Pinned<uint64_t>(1, &word_dev);
  const CUfunction add = Kernel("add_u64");
  CUdeviceptr count_dev;
  uint64_t* count = Pinned<uint64_t>(1, &count_dev);
  auto step = [&] {  // a marker that the stream got past the wait
    ASSERT_CU(CUDA_SUCCESS, Launch(add, 1, 1, s, count_dev, uint64_t{1}));
  };
  // EQ 5.
  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamWaitValue64(s, word_dev, 5, CU_STREAM_WAIT_VALUE_EQ));
  step();
  Word(word).store(4);
  EXPECT_TRUE(StillBusy(s));
  Word(word).store(5);
  ASSERT_CU(CUDA_SUCCESS, Finish(s));
  EXPECT_EQ(1u, Word(count).load());
  // GEQ is (int64_t)(*addr - value) >= 0: a word that wrapped past 2^64
  // satisfies a wait for a value just below 2^64...
  const uint64_t kNearMax = ~uint64_t{0} - 1;
  Word(word).store(kNearMax - 1);
  ASSERT_CU(CUDA_SUCCESS, cu.StreamWaitValue64(s, word_dev, kNearMax,
                                               CU_STREAM_WAIT_VALUE_GEQ));
  step();
  EXPECT_TRUE(StillBusy(s));
  Word(word).store(3);  // kNearMax + 5, wrapped
  ASSERT_CU(CUDA_SUCCESS, Finish(s));
  EXPECT_EQ(2u, Word(count).load());
  // ...and a word 2^63 ahead of the value does not satisfy it.
  Word(word).store(uint64_t{1} << 63);
  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamWaitValue64(s, word_dev, 0, CU_STREAM_WAIT_VALUE_GEQ));
  step();
  EXPECT_TRUE(StillBusy(s));
  Word(word).store((uint64_t{1} << 63) - 1);
  ASSERT_CU(CUDA_SUCCESS, Finish(s));
  EXPECT_EQ(3u, Word(count).load());
  // The word must be 8-aligned device-accessible memory.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.StreamWaitValue64(s, word_dev + 4, 0, CU_STREAM_WAIT_VALUE_EQ));
  uint64_t pageable = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.StreamWaitValue64(s, reinterpret_cast<CUdeviceptr>(&pageable), 0,
                                 CU_STREAM_WAIT_VALUE_EQ));
}

struct HostLog {
  std::mutex mu;
  std::vector<int> calls;
  const uint32_t* buffer = nullptr;
  std::vector<uint32_t> seen;
};

template <int kId>
void LogCall(void* user_data) {
  auto* log = static_cast<HostLog*>(user_data);
  std::lock_guard<std::mutex> lock(log->mu);
  log->calls.push_back(kId);
  log->seen.push_back(log->buffer[0]);
}

TEST_F(FakeCudaTest, HostFunctionsRunInStreamOrder) {
  const CUstream s = NewStream();
  CUdeviceptr buffer_dev;
  HostLog log;
  log.buffer = Pinned<uint32_t>(1, &buffer_dev);
  const CUfunction fill = Kernel("fill_u32");
  ASSERT_CU(CUDA_SUCCESS, cu.LaunchHostFunc(s, &LogCall<1>, &log));
  ASSERT_CU(CUDA_SUCCESS,
            Launch(Kernel("spin_ns"), 1, 1, s, uint64_t{10'000'000}));
  ASSERT_CU(CUDA_SUCCESS, Launch(fill, 1, 1, s, buffer_dev, 5u, uint64_t{1}));
  ASSERT_CU(CUDA_SUCCESS, cu.LaunchHostFunc(s, &LogCall<2>, &log));
  ASSERT_CU(CUDA_SUCCESS, Launch(fill, 1, 1, s, buffer_dev, 6u, uint64_t{1}));
  ASSERT_CU(CUDA_SUCCESS, cu.LaunchHostFunc(s, &LogCall<3>, &log));
  ASSERT_CU(CUDA_SUCCESS, Finish(s));
  std::lock_guard<std::mutex> lock(log.mu);
  EXPECT_EQ((std::vector<int>{1, 2, 3}), log.calls);
  EXPECT_EQ((std::vector<uint32_t>{0, 5, 6}), log.seen);
}

TEST_F(FakeCudaTest, EachThreadNeedsACurrentContext) {
  std::thread([this] {
    CUdeviceptr p;
    CUstream s;
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cu.MemAlloc(&p, 256));
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT,
              cu.StreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0));
    CUcontext current = ctx_;
    EXPECT_CU(CUDA_SUCCESS, cu.CtxGetCurrent(&current));
    EXPECT_EQ(nullptr, current);
    ASSERT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(ctx_));
    EXPECT_CU(CUDA_SUCCESS, cu.MemAlloc(&p, 256));
    EXPECT_CU(CUDA_SUCCESS, cu.MemFree(p));
  }).join();
}

TEST_F(FakeCudaTest, MemoryIsLimitedAndChecked) {
  CUdeviceptr big = Alloc(48 << 20);
  CUdeviceptr more = 0;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cu.MemAlloc(&more, 32 << 20));
  size_t free = 0, total = 0;
  EXPECT_CU(CUDA_SUCCESS, cu.MemGetInfo(&free, &total));
  EXPECT_EQ(64u << 20, total);
  EXPECT_EQ(16u << 20, free);
  EXPECT_CU(CUDA_SUCCESS, cu.MemFree(big));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.MemFree(big));
  EXPECT_CU(CUDA_SUCCESS, cu.MemAlloc(&more, 32 << 20));
  // Pinned memory is not device memory; DEVICEMAP is needed for a device
  // pointer.
  void* host = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.MemHostAlloc(&host, 48 << 20, 0));
  CUdeviceptr mapped;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.MemHostGetDevicePointer(&mapped, host, 0));
  EXPECT_CU(CUDA_SUCCESS, cu.MemFreeHost(host));
  const CUstream s = NewStream();
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.MemsetD32Async(more + 2, 0, 1, s));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.MemsetD32Async(more, 0, (32 << 20) / 4 + 1, s));
  uint32_t word = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.MemcpyHtoDAsync(0, &word, 4, s));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cu.MemsetD32Async(more, 0, 1, nullptr));
}

TEST_F(FakeCudaTest, ModuleFromNamesAndParamInfo) {
  CUmodule m = nullptr;
  EXPECT_CU(CUDA_ERROR_INVALID_IMAGE, cu.ModuleLoadData(&m, ""));
  EXPECT_CU(CUDA_ERROR_INVALID_IMAGE, cu.ModuleLoadData(&m, "fill_u32x\0"));
  static const char kImage[] = "fill_u32\0";
  ASSERT_CU(CUDA_SUCCESS, cu.ModuleLoadData(&m, kImage));
  CUfunction f = nullptr;
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cu.ModuleGetFunction(&f, m, "noop"));
  ASSERT_CU(CUDA_SUCCESS, cu.ModuleGetFunction(&f, m, "fill_u32"));
  std::vector<std::pair<size_t, size_t>> layout;
  size_t offset, size;
  while (cu.FuncGetParamInfo(f, layout.size(), &offset, &size) ==
         CUDA_SUCCESS) {
    layout.emplace_back(offset, size);
  }
  using Layout = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ((Layout{{0, 8}, {8, 4}, {16, 8}}), layout);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.FuncGetParamInfo(f, 3, &offset, &size));
  int threads = 0;
  EXPECT_CU(CUDA_SUCCESS, cu.FuncGetAttribute(
                              &threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                              Kernel("spin_ns")));
  EXPECT_EQ(64, threads);
  // Launch configuration errors are immediate and not sticky.
  const CUstream s = NewStream();
  const CUdeviceptr out = Alloc(4096);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            Launch(f, 1, 2048, s, out, 1u, uint64_t{1}));
  EXPECT_CU(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            Launch(Kernel("spin_ns"), 1, 128, s, uint64_t{0}));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.LaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.LaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr));
  EXPECT_CU(CUDA_SUCCESS, Launch(f, 1, 1, s, out, 1u, uint64_t{1}));
  EXPECT_CU(CUDA_SUCCESS, Finish(s));
  EXPECT_CU(CUDA_SUCCESS, cu.ModuleUnload(m));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE,
            Launch(f, 1, 1, s, out, 1u, uint64_t{1}));
}

TEST_F(FakeCudaTest, EventTiming) {
  const CUstream s = NewStream();
  CUevent start, end, untimed;
  ASSERT_CU(CUDA_SUCCESS, cu.EventCreate(&start, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.EventCreate(&end, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.EventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  float ms = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cu.EventElapsedTime(&ms, start, end));
  ASSERT_CU(CUDA_SUCCESS, cu.EventRecord(start, s));
  ASSERT_CU(CUDA_SUCCESS,
            Launch(Kernel("spin_ns"), 1, 1, s, uint64_t{30'000'000}));
  ASSERT_CU(CUDA_SUCCESS, cu.EventRecord(end, s));
  ASSERT_CU(CUDA_SUCCESS, cu.EventRecord(untimed, s));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cu.EventElapsedTime(&ms, start, end));
  ASSERT_CU(CUDA_SUCCESS, Finish(s));
  ASSERT_CU(CUDA_SUCCESS, cu.EventSynchronize(end));
  ASSERT_CU(CUDA_SUCCESS, cu.EventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 29.0f);
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE,
            cu.EventElapsedTime(&ms, start, untimed));
}

TEST_F(FakeCudaTest, IllegalAddressIsStickyUntilReset) {
  const CUstream s = NewStream(), other = NewStream();
  const CUdeviceptr small = Alloc(256 * 4);
  CUdeviceptr flag_dev;
  uint64_t* flag = Pinned<uint64_t>(1, &flag_dev);
  HostLog log;
  log.buffer = Pinned<uint32_t>(1);
  CUevent e;
  ASSERT_CU(CUDA_SUCCESS, cu.EventCreate(&e, 0));
  const CUfunction fill = Kernel("fill_u32"), noop = Kernel("noop");
  // `other` is blocked, with a host function and a record behind the block.
  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamWaitValue64(other, flag_dev, 1, CU_STREAM_WAIT_VALUE_EQ));
  ASSERT_CU(CUDA_SUCCESS, cu.LaunchHostFunc(other, &LogCall<1>, &log));
  ASSERT_CU(CUDA_SUCCESS, cu.EventRecord(e, other));
  // fill_u32 of 4 MiB into 1 KiB, past the 2 MiB granule (and its
  // neighbour) that holds it: the launch succeeds, the kernel faults.
  ASSERT_CU(CUDA_SUCCESS,
            Launch(fill, 4096, 256, s, small, 1u, uint64_t{1} << 20));
  ASSERT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, Finish(s));
  Word(flag).store(1);  // would release `other`, but the context is dead
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(log.mu);
    EXPECT_TRUE(log.calls.empty());
  }
  EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cu.StreamSynchronize(other));
  EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cu.EventSynchronize(e));
  EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cu.CtxSynchronize(nullptr));
  CUdeviceptr p;
  EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cu.MemAlloc(&p, 256));
  EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cu.MemsetD32Async(small, 0, 1, s));
  EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, Launch(noop, 1, 1, s));
  CUstream s2;
  EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS,
            cu.StreamCreateWithPriority(&s2, CU_STREAM_NON_BLOCKING, 0));
  EXPECT_CU(CUDA_SUCCESS, cu.MemFree(small));
  EXPECT_CU(CUDA_SUCCESS, cu.StreamDestroy(s));
  // Reset (this binary runs with FAKEGPU_RESET_CLEARS_STICKY=1): everything
  // of the context is gone; using its handles now is Misuse
  // (fake_cuda_hazards_test).
  ASSERT_CU(CUDA_SUCCESS, cu.PrimaryCtxReset(0));
  EXPECT_CU(CUDA_ERROR_CONTEXT_IS_DESTROYED, cu.MemAlloc(&p, 256));
  EXPECT_CU(CUDA_ERROR_CONTEXT_IS_DESTROYED, cu.CtxSetCurrent(ctx_));
  CUcontext fresh;
  ASSERT_CU(CUDA_SUCCESS, cu.PrimaryCtxRetain(&fresh, 0));
  EXPECT_NE(ctx_, fresh);
  ASSERT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(fresh));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.MemFreeHost(flag));
  // The new context works.
  ctx_ = fresh;
  samples_ = nullptr;
  const CUstream s3 = NewStream();
  const CUdeviceptr buffer = Alloc(16);
  uint32_t result[4] = {};
  ASSERT_CU(CUDA_SUCCESS,
            Launch(Kernel("fill_u32"), 1, 32, s3, buffer, 3u, uint64_t{4}));
  ASSERT_CU(CUDA_SUCCESS, cu.MemcpyDtoHAsync(result, buffer, 16, s3));
  EXPECT_EQ(3u, result[3]);
  EXPECT_CU(CUDA_SUCCESS, cu.CtxSynchronize(nullptr));
  EXPECT_CU(CUDA_SUCCESS, cu.PrimaryCtxRelease(0));  // the second retain
}

}  // namespace
}  // namespace fakecuda_test
