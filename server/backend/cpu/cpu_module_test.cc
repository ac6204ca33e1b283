// Tests of CPU module loading and of the samples kernels' edge cases (the
// rest of the CPU backend runs the cross-backend conformance suite in
// tests/conformance, and cpu_scheduler_test).
#include "server/backend/cpu/cpu_module.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/backend/cpu/cpu_buffer.h"

namespace gpustream::backend {
namespace {

TEST(CpuModuleLoadTest, LoadsSharedLibraryModule) {
  const std::string path = std::string(std::getenv("TEST_SRCDIR")) +
                           "/gpustream/kernels/cpu/libgpustream_samples.so";
  auto module = LoadCpuModule(path);
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ((*module)->info().name, "samples");
  EXPECT_EQ((*module)->info().kernels.size(), 7u);
  const KernelSignature& fill = (*module)->info().kernels[0];
  ASSERT_EQ(fill.layout.size(), fill.params.size());
  EXPECT_EQ(fill.limits.max_threads_per_block, kCpuMaxThreadsPerBlock);
  EXPECT_EQ(LoadCpuModule("/nonexistent.so").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The samples module as a table, straight from the library linked in.
extern "C" const GsModuleDef* gpustream_cpu_module(void);

std::unique_ptr<CpuModule> Samples() {
  auto module = CpuModule::Create(gpustream_cpu_module(), "samples");
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

TEST(CpuModuleAbiTest, LoadsAbiOneAndTwoOnly) {
  GsModuleDef def = *gpustream_cpu_module();
  EXPECT_EQ(def.abi_version, 2u);
  def.abi_version = 1;  // GsLaunch only grew at its end: still runs.
  EXPECT_TRUE(CpuModule::Create(&def, "v1").ok());
  for (uint32_t bad : {0u, 3u}) {
    def.abi_version = bad;
    auto module = CpuModule::Create(&def, "bad");
    EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(module.status().message().find("supports 1 to 2"),
              std::string::npos)
        << module.status();
  }
}

// 2^64 - 1 ns saturates to "until stopped" (it used to wrap into the past
// and return at once); a stop request ends it.
TEST(CpuModuleAbiTest, SpinNsPollsTheStopWordAndSaturates) {
  auto samples = Samples();
  ASSERT_NE(samples, nullptr);
  const auto& spin =
      static_cast<const CpuKernel&>(**samples->FindKernel("spin_ns"));
  std::vector<KernelArg> args = {~uint64_t{0}};
  volatile int stop = 0;
  std::atomic<bool> returned{false};
  std::thread runner([&] {
    EXPECT_TRUE(spin.Run({}, args, &stop).ok());
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(returned.load());
  // The daemon's watchdog writes the word atomically (LaunchSlot).
  __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
  runner.join();
  EXPECT_TRUE(returned.load());
}

// grid x block may exceed 2^64 (here exactly 2^64, which wrapped to 0 and
// made add_u64 think it had no threads): the count saturates.
TEST(CpuModuleAbiTest, ThreadCountSaturates) {
  auto samples = Samples();
  ASSERT_NE(samples, nullptr);
  const auto& add =
      static_cast<const CpuKernel&>(**samples->FindKernel("add_u64"));
  auto pool = std::make_shared<CpuMemoryPool>(1 << 20);
  auto buffer = CpuBuffer::Create(pool, 8, MemoryKind::kDevice);
  ASSERT_TRUE(buffer.ok());
  std::memset((*buffer)->data(), 0, 8);
  std::vector<KernelArg> args = {
      BufferArg{std::shared_ptr<Buffer>(std::move(*buffer))}, uint64_t{5}};
  LaunchConfig config;
  config.grid = {65536, 65536, 65536};
  config.block = {65536, 1, 1};
  const volatile int stop = 0;
  ASSERT_TRUE(add.Run(config, args, &stop).ok());
  auto& out = static_cast<CpuBuffer&>(*std::get<BufferArg>(args[0]).buffer);
  uint64_t v;
  std::memcpy(&v, out.data(), 8);
  EXPECT_EQ(v, 5u);
}

}  // namespace
}  // namespace gpustream::backend
