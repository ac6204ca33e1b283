// The fake driver's stream capture and graphs: work captured is recorded,
// not run; an executable graph runs it once per launch, each launch after
// the previous one of the same graph on whatever stream; and the capture
// rules cuda.h documents (what a capture refuses and invalidates, which
// threads its mode restrains, who may end it).
#include <cstdint>
#include <thread>

#include "gtest/gtest.h"
#include "tests/fake_cuda/fake_cuda_testing.h"

namespace fakecuda_test {
namespace {

class FakeCudaGraphsTest : public FakeCudaTest {
 protected:
  // Runs `call` on a thread of its own with the test's context current.
  CUresult OnOtherThread(const std::function<CUresult()>& call) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    std::thread t([&] {
      cu.CtxSetCurrent(ctx_);
      r = call();
    });
    t.join();
    return r;
  }

  // Ends the capture of `s` and instantiates it.
  CUgraphExec EndAndInstantiate(CUstream s) {
    CUgraph graph = nullptr;
    EXPECT_CU(CUDA_SUCCESS, cu.StreamEndCapture(s, &graph));
    CUgraphExec exec = nullptr;
    EXPECT_CU(CUDA_SUCCESS, cu.GraphInstantiate(&exec, graph, 0));
    EXPECT_CU(CUDA_SUCCESS, cu.GraphDestroy(graph));
    return exec;
  }
};

TEST_F(FakeCudaGraphsTest, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  CUdeviceptr counter_dev = 0;
  uint64_t* counter = Pinned<uint64_t>(1, &counter_dev);
  const CUfunction add = Kernel("add_u64");
  CUstream s = NewStream();
  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_CU(CUDA_SUCCESS, cu.StreamIsCapturing(s, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  for (int i = 0; i < 3; ++i) {
    ASSERT_CU(CUDA_SUCCESS, Launch(add, 1, 1, s, counter_dev, uint64_t{1}));
  }
  ASSERT_CU(CUDA_SUCCESS, cu.MemsetD32Async(counter_dev + 4, 7, 1, s));
  CUgraphExec exec = EndAndInstantiate(s);
  ASSERT_NE(exec, nullptr);
  // Nothing ran, and nothing is pending on the stream.
  EXPECT_CU(CUDA_SUCCESS, cu.StreamQuery(s));
  EXPECT_EQ(Word(counter).load(), 0u);

  ASSERT_CU(CUDA_SUCCESS, cu.GraphLaunch(exec, s));
  ASSERT_CU(CUDA_SUCCESS, cu.GraphLaunch(exec, s));
  ASSERT_CU(CUDA_SUCCESS, Finish(s));
  EXPECT_EQ(Word(counter).load() & 0xffffffff, 6u);
  EXPECT_EQ(Word(counter).load() >> 32, 7u);
  EXPECT_CU(CUDA_SUCCESS, cu.GraphExecDestroy(exec));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cu.GraphLaunch(exec, s));
}

// cuGraphLaunch: "Each launch is ordered behind both any previous work in
// hStream and any previous launches of hGraphExec". A launch on an idle
// stream waits for the graph's launch parked on another.
TEST_F(FakeCudaGraphsTest, LaunchesOfOneGraphRunInOrderAcrossStreams) {
  CUdeviceptr gate_dev = 0, counter_dev = 0;
  uint64_t* gate = Pinned<uint64_t>(1, &gate_dev);
  uint64_t* counter = Pinned<uint64_t>(1, &counter_dev);
  CUstream capture = NewStream();
  ASSERT_CU(CUDA_SUCCESS, cu.StreamBeginCapture(
                              capture, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  ASSERT_CU(CUDA_SUCCESS, cu.StreamWaitValue64(capture, gate_dev, 1,
                                               CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_CU(CUDA_SUCCESS,
            Launch(Kernel("add_u64"), 1, 1, capture, counter_dev, uint64_t{1}));
  CUgraphExec exec = EndAndInstantiate(capture);

  CUstream first = NewStream(), second = NewStream();
  ASSERT_CU(CUDA_SUCCESS, cu.GraphLaunch(exec, first));
  ASSERT_CU(CUDA_SUCCESS, cu.GraphLaunch(exec, second));
  EXPECT_TRUE(StillBusy(second)) << "ran beside the launch before it";
  EXPECT_EQ(Word(counter).load(), 0u);
  Word(gate).store(1);
  ASSERT_CU(CUDA_SUCCESS, Finish(first));
  ASSERT_CU(CUDA_SUCCESS, Finish(second));
  EXPECT_EQ(Word(counter).load(), 2u);
  EXPECT_CU(CUDA_SUCCESS, cu.GraphExecDestroy(exec));
}

TEST_F(FakeCudaGraphsTest, QueryingTheCapturingStreamInvalidatesTheCapture) {
  CUstream s = NewStream();
  CUdeviceptr p = Alloc(64);
  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  ASSERT_CU(CUDA_ERROR_ILLEGAL_STATE,
            cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.StreamQuery(s));
  // Work after the violation is refused; the capture ends with no graph.
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            cu.MemsetD32Async(p, 1, 16, s));
  CUgraph graph = reinterpret_cast<CUgraph>(0x1);
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            cu.StreamEndCapture(s, &graph));
  EXPECT_EQ(graph, nullptr);
  EXPECT_CU(CUDA_ERROR_ILLEGAL_STATE, cu.StreamEndCapture(s, &graph));
  // The stream runs work again.
  EXPECT_CU(CUDA_SUCCESS, cu.MemsetD32Async(p, 1, 16, s));
  EXPECT_CU(CUDA_SUCCESS, Finish(s));
}

// Work a capture cannot record (here an event record, which the fake does
// not model in captures) is refused and invalidates it, as is a
// synchronize of the stream.
TEST_F(FakeCudaGraphsTest, UncapturableWorkInvalidatesTheCapture) {
  CUstream s = NewStream();
  CUevent e = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.EventCreate(&e, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.EventRecord(e, s));
  CUgraph graph = nullptr;
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            cu.StreamEndCapture(s, &graph));
  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.StreamSynchronize(s));
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            cu.StreamEndCapture(s, &graph));
  EXPECT_CU(CUDA_SUCCESS, cu.EventDestroy(e));
}

// A GLOBAL capture forbids every thread's potentially unsafe calls (here
// an allocation); THREAD_LOCAL only the capturing thread's; RELAXED none.
TEST_F(FakeCudaGraphsTest, TheCaptureModeDecidesWhoseUnsafeCallsFail) {
  CUstream s = NewStream();
  CUdeviceptr target = Alloc(64);
  CUdeviceptr a = 0, b = 0, c = 0;
  CUgraph graph = nullptr;

  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            OnOtherThread([&] { return cu.MemAlloc(&a, 64); }));
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            cu.StreamEndCapture(s, &graph));

  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  EXPECT_CU(CUDA_SUCCESS, OnOtherThread([&] { return cu.MemAlloc(&a, 64); }));
  ASSERT_CU(CUDA_SUCCESS, cu.MemsetD32Async(target, 1, 16, s));
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.MemAlloc(&b, 64));
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            cu.StreamEndCapture(s, &graph));

  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  ASSERT_CU(CUDA_SUCCESS, cu.MemsetD32Async(target, 1, 16, s));
  EXPECT_CU(CUDA_SUCCESS, cu.MemAlloc(&c, 64));
  ASSERT_CU(CUDA_SUCCESS, cu.StreamEndCapture(s, &graph));
  EXPECT_NE(graph, nullptr);
  EXPECT_CU(CUDA_SUCCESS, cu.GraphDestroy(graph));
  for (CUdeviceptr p : {target, a, c}) EXPECT_CU(CUDA_SUCCESS, cu.MemFree(p));
}

// A free synchronizes the context, and a capturing stream cannot be
// synchronized: whatever the capture's mode, a free on any thread (the
// daemon's cleanup thread) fails and breaks the capture; so do a context
// synchronize and a module unload.
TEST_F(FakeCudaGraphsTest, AFreeDuringACaptureInItsContextBreaksBoth) {
  CUstream s = NewStream();
  CUdeviceptr target = Alloc(64), doomed = Alloc(64);
  CUmodule module = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.ModuleLoadData(&module, "noop"));
  for (CUstreamCaptureMode mode :
       {CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_RELAXED}) {
    ASSERT_CU(CUDA_SUCCESS, cu.StreamBeginCapture(s, mode));
    ASSERT_CU(CUDA_SUCCESS, cu.MemsetD32Async(target, 1, 16, s));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              OnOtherThread([&] { return cu.MemFree(doomed); }));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              OnOtherThread([&] { return cu.CtxSynchronize(nullptr); }));
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              OnOtherThread([&] { return cu.ModuleUnload(module); }));
    CUgraph graph = nullptr;
    EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
              cu.StreamEndCapture(s, &graph));
  }
  EXPECT_CU(CUDA_SUCCESS, cu.MemFree(doomed));
  EXPECT_CU(CUDA_SUCCESS, cu.MemFree(target));
  EXPECT_CU(CUDA_SUCCESS, cu.ModuleUnload(module));
}

// Unless RELAXED, the thread that began a capture must end it; a wrong
// thread's attempt leaves the capture going.
TEST_F(FakeCudaGraphsTest, OnlyTheCapturingThreadEndsAThreadLocalCapture) {
  CUstream s = NewStream();
  ASSERT_CU(CUDA_SUCCESS,
            cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUgraph graph = nullptr;
  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
            OnOtherThread([&] { return cu.StreamEndCapture(s, &graph); }));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_CU(CUDA_SUCCESS, cu.StreamIsCapturing(s, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(CUDA_SUCCESS, cu.StreamEndCapture(s, &graph));
  EXPECT_CU(CUDA_SUCCESS, cu.GraphDestroy(graph));
}

}  // namespace
}  // namespace fakecuda_test
