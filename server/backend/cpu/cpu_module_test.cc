// Tests of CPU module loading and of the samples kernels' edge cases (the
// rest of the CPU backend runs the cross-backend conformance suite in
// tests/conformance, and cpu_scheduler_test).
#include "server/backend/cpu/cpu_module.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
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
  EXPECT_EQ((*module)->info().kernels.size(), 9u);
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

TEST(CpuModuleAbiTest, LoadsAbiOneToFourOnly) {
  GsModuleDef def = *gpustream_cpu_module();
  EXPECT_EQ(def.abi_version, 4u);
  for (uint32_t bad : {0u, 5u}) {
    def.abi_version = bad;
    auto module = CpuModule::Create(&def, "bad");
    EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(module.status().message().find("supports 1 to 4"),
              std::string::npos)
        << module.status();
  }
}

// Modules of ABI 1 and 2 end GsModuleDef before `extents` (GsLaunch only
// grew at its end: they still run): their kernels load unchecked, and the
// field is not read even where the table has it.
TEST(CpuModuleAbiTest, OlderModulesLoadUnchecked) {
  for (uint32_t abi : {1u, 2u}) {
    // The table as an older module has it: it ends before `extents` (a
    // heap block of that size, so ASan sees any read past it).
    constexpr size_t kOldSize = offsetof(GsModuleDef, extents);
    std::unique_ptr<char[]> old(new char[kOldSize]);
    std::memcpy(old.get(), gpustream_cpu_module(), kOldSize);
    GsModuleDef* def = reinterpret_cast<GsModuleDef*>(old.get());
    def->abi_version = abi;
    auto module = CpuModule::Create(def, "old");
    ASSERT_TRUE(module.ok()) << module.status();
    const KernelSignature& fill =
        (*(*module)->FindKernel("fill_u32"))->signature();
    EXPECT_EQ(fill.params.size(), 3u);
    EXPECT_FALSE(fill.checked()) << "ABI " << abi;
    // No BUFFER param: nothing to check.
    EXPECT_TRUE((*(*module)->FindKernel("spin_ns"))->signature().checked());
  }
}

TEST(CpuModuleAbiTest, SamplesDeclareTheirExtents) {
  std::unique_ptr<CpuModule> samples = Samples();
  ASSERT_NE(samples, nullptr);
  for (const KernelSignature& sig : samples->info().kernels) {
    EXPECT_TRUE(sig.checked()) << sig.name;
  }
  // name -> (param -> {bytes, bytes_per_element, count_param}).
  const std::map<std::string, std::map<int, std::array<int64_t, 3>>> want = {
      {"fill_u32", {{0, {0, 4, 2}}}},
      {"vector_add_f32", {{0, {0, 4, 3}}, {1, {0, 4, 3}}, {2, {0, 4, 3}}}},
      {"saxpy_f32", {{1, {0, 4, 3}}, {2, {0, 4, 3}}}},
      {"add_u64", {{0, {8, 0, -1}}}},
  };
  for (const auto& [name, params] : want) {
    const KernelSignature& sig = (*samples->FindKernel(name))->signature();
    for (const auto& [p, e] : params) {
      ASSERT_TRUE(sig.extents.at(p).has_value()) << name << " " << p;
      EXPECT_EQ(sig.extents[p]->bytes, static_cast<uint64_t>(e[0])) << name;
      EXPECT_EQ(sig.extents[p]->bytes_per_element, static_cast<uint64_t>(e[1]))
          << name;
      EXPECT_EQ(sig.extents[p]->count_param, e[2]) << name;
      EXPECT_EQ(sig.extents[p]->bytes_per_thread, 0u) << name;
    }
  }
}

// An extent belongs to a BUFFER param and counts an integer param.
TEST(CpuModuleAbiTest, MalformedExtentsAreRefused) {
  static constexpr GsParamKind kParams[] = {GS_PARAM_BUFFER, GS_PARAM_F32,
                                            GS_PARAM_U64};
  const struct {
    GsExtent extents[3];
    const char* error;
  } cases[] = {
      {{{0, -1, 0, 0, 0}, {1, -1, 4, 0, 0}, {0, -1, 0, 0, 0}},
       "param 1 is F32 but declares an extent"},
      {{{1, 1, 0, 4, 0}, {}, {}}, "counts param 1, a F32"},
      {{{1, 7, 0, 4, 0}, {}, {}}, "counts param 7, which the kernel"},
      {{{1, -1, 0, 4, 0}, {}, {}}, "bytes_per_element without count_param"},
      {{{1, 2, 0, 0, 0}, {}, {}}, "count_param without bytes_per_element"},
  };
  for (const auto& c : cases) {
    const GsKernelDef kernels[] = {
        {"k", kParams, 3, [](const GsLaunch*) { return 0; }}};
    const GsExtent* extents[] = {c.extents};
    const GsModuleDef def = {GS_CPU_MODULE_ABI_VERSION, "m", kernels, 1,
                             extents};
    auto module = CpuModule::Create(&def, "m.so");
    EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(module.status().message().find(c.error), std::string::npos)
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

// What each call of a kernel saw: its block range and whether it was
// cooperative. Written by concurrent calls.
struct Seen {
  absl::Mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> ranges ABSL_GUARDED_BY(mu);
  int cooperative ABSL_GUARDED_BY(mu) = 0;
};
Seen* g_seen = nullptr;

int RecordCall(const GsLaunch* l) {
  absl::MutexLock lock(&g_seen->mu);
  g_seen->ranges.push_back({l->first_block, l->block_count});
  g_seen->cooperative += l->cooperative != 0;
  return 0;
}

// A module of one parameterless kernel `k` (the table is copied on load).
std::unique_ptr<CpuModule> OneKernel(uint32_t abi, GsKernelFn fn) {
  const GsKernelDef kernels[1] = {{"k", nullptr, 0, fn}};
  const GsModuleDef def = {abi, "m", kernels, 1, nullptr};
  auto module = CpuModule::Create(&def, "m.so");
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

LaunchConfig CooperativeGrid(uint32_t blocks) {
  LaunchConfig config;
  config.grid = {blocks};
  config.cooperative = true;
  return config;
}

// ABI 4 kernels run a cooperative grid one call per block, all at once;
// older kernels know no block range and get one call for the whole grid.
TEST(CpuModuleAbiTest, CooperativeLaunchesCallAbiFourKernelsPerBlock) {
  Seen seen;
  g_seen = &seen;
  const volatile int stop = 0;
  std::vector<KernelArg> none;
  for (uint32_t abi : {3u, 4u}) {
    auto module = OneKernel(abi, &RecordCall);
    ASSERT_NE(module, nullptr);
    const auto& k = static_cast<const CpuKernel&>(**module->FindKernel("k"));
    ASSERT_TRUE(k.Run(CooperativeGrid(5), none, &stop).ok());
    absl::MutexLock lock(&seen.mu);
    std::sort(seen.ranges.begin(), seen.ranges.end());
    if (abi == 3) {
      EXPECT_EQ(seen.ranges,
                (std::vector<std::pair<uint64_t, uint64_t>>{{0, 5}}));
    } else {
      EXPECT_EQ(seen.ranges, (std::vector<std::pair<uint64_t, uint64_t>>{
                                 {0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}}));
      EXPECT_EQ(seen.cooperative, 5);
    }
    seen.ranges.clear();
    seen.cooperative = 0;
  }
  g_seen = nullptr;
}

// Block 1 returns without reaching the barrier: the others wait in it
// until the launch is asked to stop, then get nonzero and fail; the launch
// returns (no block is left waiting) with the first failing block's error.
int SkipsTheBarrierInBlockOne(const GsLaunch* l) {
  if (l->first_block == 1) return 0;
  if (gs_grid_sync(l) != 0) {
    std::snprintf(l->error, l->error_size, "stopped in the barrier");
    return 1;
  }
  return 0;
}

TEST(CpuModuleAbiTest, AStopReleasesBlocksWaitingInTheGridBarrier) {
  auto module = OneKernel(4, &SkipsTheBarrierInBlockOne);
  ASSERT_NE(module, nullptr);
  const auto& k = static_cast<const CpuKernel&>(**module->FindKernel("k"));
  volatile int stop = 0;
  std::vector<KernelArg> none;
  std::atomic<bool> returned{false};
  absl::Status status;
  std::thread runner([&] {
    status = k.Run(CooperativeGrid(4), none, &stop);
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(returned.load());
  __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
  runner.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_NE(status.message().find("stopped in the barrier"), std::string::npos)
      << status;
}

// Block 2 faults before the barrier: the others are released at once
// (not at the time limit) and the launch reports the fault.
int FaultsInBlockTwo(const GsLaunch* l) {
  if (l->first_block == 2) {
    std::snprintf(l->error, l->error_size, "block 2 faulted");
    return 1;
  }
  return gs_grid_sync(l) != 0 ? 1 : 0;
}

TEST(CpuModuleAbiTest, AFaultingBlockReleasesTheGrid) {
  auto module = OneKernel(4, &FaultsInBlockTwo);
  ASSERT_NE(module, nullptr);
  const auto& k = static_cast<const CpuKernel&>(**module->FindKernel("k"));
  const volatile int stop = 0;  // Never set: only the fault can release.
  std::vector<KernelArg> none;
  const absl::Time start = absl::Now();
  absl::Status status = k.Run(CooperativeGrid(6), none, &stop);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_NE(status.message().find("block 2 faulted"), std::string::npos)
      << status;
}

// Outside a cooperative launch the barrier fails at once.
TEST(CpuModuleAbiTest, GridSyncOutsideACooperativeLaunchFails) {
  auto module = OneKernel(4, &SkipsTheBarrierInBlockOne);
  ASSERT_NE(module, nullptr);
  const auto& k = static_cast<const CpuKernel&>(**module->FindKernel("k"));
  const volatile int stop = 0;
  std::vector<KernelArg> none;
  LaunchConfig config;
  config.grid = {4};
  EXPECT_EQ(k.Run(config, none, &stop).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace gpustream::backend
