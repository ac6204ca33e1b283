// Tests of libfakecuda.so's isolation: the environment (each case in a
// child process, as the fake reads it once), contexts of different devices,
// and many threads using a context while it is reset.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fake_cuda/fake_cuda_testing.h"

extern char** environ;

namespace fakecuda_test {
namespace {

// Runs this binary again with only `test` and `env` added; true if it
// passed within 30 s. Bazel's output files are not passed on.
bool RunChild(const std::string& test, std::vector<std::string> env) {
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    if (var.rfind("XML_OUTPUT_FILE=", 0) != 0 && var.rfind("GTEST_", 0) != 0 &&
        var.rfind("TEST_PREMATURE", 0) != 0 &&
        var.rfind("TEST_SHARD", 0) != 0 && var.rfind("TEST_TOTAL", 0) != 0 &&
        var.rfind("FAKECUDA_", 0) != 0 && var.rfind("FAKEGPU_", 0) != 0) {
      env.push_back(var);
    }
  }
  // The child marks that its case ran: a filter that matches nothing exits
  // 0 too, and must fail.
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string ran = std::string(tmp != nullptr ? tmp : "/tmp") +
                          "/child-" + std::to_string(getpid()) + "-ran";
  std::remove(ran.c_str());
  env.push_back("FAKECUDA_TEST_CHILD_RAN=" + ran);
  std::string filter = "--gtest_filter=" + test;
  std::string exe = "/proc/self/exe";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  std::vector<char*> envp;
  for (std::string& var : env) envp.push_back(var.data());
  envp.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) !=
      0) {
    return false;
  }
  int status = 0;
  const bool exited =
      Eventually([&] { return waitpid(pid, &status, WNOHANG) == pid; },
                 std::chrono::milliseconds(30000));
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return false;
  }
  const bool marked = std::remove(ran.c_str()) == 0;
  EXPECT_TRUE(marked) << "the child ran no case matching " << test;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 && marked;
}

std::string ChildCase() {
  const char* c = std::getenv("FAKECUDA_TEST_CHILD");
  return c != nullptr ? c : "";
}

// In a child: tells RunChild that the case it asked for runs.
void MarkChildRan() {
  if (const char* ran = std::getenv("FAKECUDA_TEST_CHILD_RAN")) {
    if (FILE* f = std::fopen(ran, "w")) std::fclose(f);
  }
}

TEST(EnvChild, NoDevices) {
  if (ChildCase() != "no_devices") GTEST_SKIP() << "runs in a child";
  MarkChildRan();
  int count;
  EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cu.DeviceGetCount(&count));
  EXPECT_CU(CUDA_ERROR_NO_DEVICE, cu.Init(0));
  EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cu.DeviceGetCount(&count));
}

TEST(EnvChild, NoWaitValue) {
  if (ChildCase() != "no_wait_value") GTEST_SKIP() << "runs in a child";
  MarkChildRan();
  ASSERT_CU(CUDA_SUCCESS, cu.Init(0));
  int value = -1;
  EXPECT_CU(CUDA_SUCCESS,
            cu.DeviceGetAttribute(
                &value, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0));
  EXPECT_EQ(0, value);
  CUcontext ctx;
  ASSERT_CU(CUDA_SUCCESS, cu.PrimaryCtxRetain(&ctx, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(ctx));
  CUstream s;
  ASSERT_CU(CUDA_SUCCESS, cu.StreamCreateWithPriority(&s, 0, 0));
  CUdeviceptr word;
  ASSERT_CU(CUDA_SUCCESS, cu.MemAlloc(&word, 8));
  EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED,
            cu.StreamWaitValue64(s, word, 0, CU_STREAM_WAIT_VALUE_EQ));
  EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, cu.StreamWriteValue64(s, word, 0, 0));
  EXPECT_CU(CUDA_SUCCESS, cu.PrimaryCtxRelease(0));
}

TEST(Environment, NoDevicesFailsInit) {
  EXPECT_TRUE(
      RunChild("EnvChild.NoDevices",
               {"FAKEGPU_DEVICES=0", "FAKECUDA_TEST_CHILD=no_devices"}));
}

TEST(Environment, NoWaitValueDisablesStreamMemOps) {
  EXPECT_TRUE(RunChild(
      "EnvChild.NoWaitValue",
      {"FAKEGPU_NO_WAIT_VALUE=1", "FAKECUDA_TEST_CHILD=no_wait_value"}));
}

TEST_F(FakeCudaTest, DeviceMemoryBelongsToItsContext) {
  const CUdeviceptr on_device0 = Alloc(64);
  const CUstream s0 = NewStream();
  const CUfunction fill0 = Kernel("fill_u32");
  CUcontext ctx1;
  ASSERT_CU(CUDA_SUCCESS, cu.PrimaryCtxRetain(&ctx1, 1));
  ASSERT_NE(ctx_, ctx1);
  ASSERT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(ctx1));
  const CUstream s1 = NewStream();
  samples_ = nullptr;  // modules are per context
  const CUfunction fill1 = Kernel("fill_u32");
  // Launches need the function, the stream and the current context alike.
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE,
            Launch(fill0, 1, 16, s1, on_device0, 1u, uint64_t{16}));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE,
            Launch(fill1, 1, 16, s0, on_device0, 1u, uint64_t{16}));
  // Device 1 may not touch device 0's memory: its context faults...
  ASSERT_CU(CUDA_SUCCESS,
            Launch(fill1, 1, 16, s1, on_device0, 1u, uint64_t{16}));
  EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, Finish(s1));
  // ...and device 0's is unaffected.
  ASSERT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(ctx_));
  ASSERT_CU(CUDA_SUCCESS,
            Launch(fill0, 1, 16, s0, on_device0, 1u, uint64_t{16}));
  EXPECT_CU(CUDA_SUCCESS, Finish(s0));
  // Destroys device 1's context; s1 is gone with it (a use would be
  // Misuse, fake_cuda_hazards_test).
  EXPECT_CU(CUDA_SUCCESS, cu.PrimaryCtxRelease(1));
}

}  // namespace
}  // namespace fakecuda_test
