// sharing_bench: the gpu_sharing modes of a CUDA device, through gpustreamd
// (in this process, clients over its unix socket), two tenants side by side:
//   1. SM shares: alice (weight 2) and bob (weight 1) each keep a queue busy
//      with SM-bound work (spin_ns over more blocks than the device has
//      SMs) for --seconds; launches completed per tenant and their ratio,
//      under SM_PARTITIONS (goal 2:1) and SHARED_CONTEXT (weights do not
//      split a context's SMs);
//   2. fault isolation: alice launches a faulting kernel in a loop (each
//      fault ends her session; she opens another) while bob fills and reads
//      back a buffer, checking every value; bob's verified rounds and
//      errors under CONTEXT_PER_TENANT (goal: zero errors) and
//      SHARED_CONTEXT (each fault ends his session too).
// On the fake driver (the default where Bazel built it) the figures are the
// CPU emulation's: green contexts limit a kernel's waves to the partition's
// SMs, but kernels of one context do not contend for SMs there (the fake is
// kinder than a GPU in SHARED_CONTEXT).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "server/backend/backend_factory.h"
#include "server/tenants/tenant_registry.h"
#include "server/util/release_mutexes.h"

ABSL_FLAG(std::string, cuda_driver, "libcuda.so.1",
          "The CUDA driver library: a file name searched as dlopen does, or "
          "a path (bazel-bin/tests/fake_cuda/libfakecuda.so: the fake)");
ABSL_FLAG(double, seconds, 2.0, "Duration of each figure");
ABSL_FLAG(int, blocks, 640, "Blocks per SM-bound launch (spin_ns)");
ABSL_FLAG(uint64_t, block_ns, 1000000, "How long each block of it runs");

namespace gpustream::bench {
namespace {

constexpr char kAlice[] = "alice";
constexpr char kBob[] = "bob";

// A daemon on device 0 of the CUDA driver with tenants alice (weight 2) and
// bob (weight 1), sharing the GPU as `mode` says.
std::unique_ptr<InProcessDaemon> StartDaemon(v1::GpuSharing mode) {
  backend::BackendOptions options;
  options.backend = "cuda";
  options.cuda_driver = absl::GetFlag(FLAGS_cuda_driver);
  auto devices = backend::CreateDevices(options);
  Check(devices.status(), "CreateDevices");
  v1::ServerConfig config;
  for (auto [name, weight] : {std::pair{kAlice, 2}, std::pair{kBob, 1}}) {
    v1::Tenant* t = config.add_tenants();
    t->set_name(name);
    t->set_weight(weight);
    t->add_token_sha256(tenants::Sha256Hex(absl::StrCat(name, "-token")));
  }
  auto registry = tenants::TenantRegistry::Create(config);
  Check(registry.status(), "TenantRegistry::Create");
  session::ManagerOptions manager;
  manager.gpu_sharing = mode;
  return std::make_unique<InProcessDaemon>(std::move(devices->devices),
                                           "gpustream-sharing-bench", nullptr,
                                           manager, *std::move(registry));
}

client::Client Connect(const InProcessDaemon& daemon, const char* tenant) {
  auto c = client::Client::Connect(daemon.unix_address(),
                                   {.token = absl::StrCat(tenant, "-token")});
  Check(c.status(), "connect");
  return *std::move(c);
}

// SM-bound launches per second that `tenant` completes over about
// `window`, 8 enqueued per synchronize (the round trip is small beside
// them, so that the rate is the device's).
double SmBoundRate(const InProcessDaemon& daemon, const char* tenant,
                   absl::Duration window) {
  client::Client c = Connect(daemon, tenant);
  auto session = c.open_session({.client_name = tenant});
  Check(session.status(), "open_session");
  client::Queue& q = (*session)->default_queue();
  const uint32_t blocks = static_cast<uint32_t>(absl::GetFlag(FLAGS_blocks));
  const uint64_t ns = absl::GetFlag(FLAGS_block_ns);
  int64_t done = 0;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < window && done < 1'000'000) {
    for (int i = 0; i < 8; ++i) {
      q.launch("samples", "spin_ns", {blocks}, {1}, {ns});
    }
    Check(q.synchronize(absl::Seconds(60)), "synchronize");
    done += 8;
  }
  return static_cast<double>(done) / absl::ToDoubleSeconds(absl::Now() - start);
}

struct ShareFigures {
  double alice = 0, bob = 0;  // Launches per second.
};

ShareFigures MeasureShares(v1::GpuSharing mode, absl::Duration window) {
  std::unique_ptr<InProcessDaemon> daemon = StartDaemon(mode);
  ShareFigures f;
  std::thread bob([&] { f.bob = SmBoundRate(*daemon, kBob, window); });
  f.alice = SmBoundRate(*daemon, kAlice, window);
  bob.join();
  return f;
}

struct FaultFigures {
  int faults = 0;
  int64_t bob_rounds = 0, bob_errors = 0;
};

// Bob's fill-and-check rounds (reopening his session after an error) while
// alice faults her kernels, for `window`.
FaultFigures MeasureFaultIsolation(v1::GpuSharing mode, absl::Duration window) {
  std::unique_ptr<InProcessDaemon> daemon = StartDaemon(mode);
  FaultFigures f;
  std::atomic<bool> stop{false};
  std::thread bob([&] {
    client::Client c = Connect(*daemon, kBob);
    for (uint32_t round = 1; !stop.load() && round < 10'000'000; ++round) {
      auto session = c.open_session({.client_name = kBob});
      if (!session.ok()) {
        ++f.bob_errors;
        absl::SleepFor(absl::Milliseconds(1));
        continue;
      }
      auto buffer = (*session)->allocate(4096);
      bool healthy = buffer.ok();
      client::Queue& q = (*session)->default_queue();
      for (; healthy && !stop.load(); ++round) {
        q.launch("samples", "fill_u32", {4}, {256}, {*buffer, round, 1024u});
        auto data = q.read<uint32_t>(*buffer, 1024);
        healthy = data.ok() && (*data)[0] == round && (*data)[1023] == round;
        if (healthy) ++f.bob_rounds;
      }
      if (!healthy) ++f.bob_errors;
    }
  });
  client::Client alice = Connect(*daemon, kAlice);
  const absl::Time end = absl::Now() + window;
  while (absl::Now() < end && f.faults < 100'000) {
    auto session = alice.open_session({.client_name = kAlice});
    if (!session.ok()) {  // The shared context may be recovering.
      absl::SleepFor(absl::Milliseconds(1));
      continue;
    }
    (*session)->default_queue().launch("samples", "trap", {1}, {1}, {});
    if (!(*session)->default_queue().synchronize(absl::Seconds(20)).ok()) {
      ++f.faults;
    }
  }
  stop = true;
  bob.join();
  return f;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Lets the shared context recover from each fault in the contrast figure
  // (a GPU's reset need not clear one: see docs/operations.md).
  setenv("FAKEGPU_RESET_CLEARS_STICKY", "1", /*overwrite=*/0);
  const std::string driver = absl::GetFlag(FLAGS_cuda_driver);
  {
    backend::BackendOptions probe;
    probe.backend = "cuda";
    probe.cuda_driver = driver;
    if (auto devices = backend::CreateDevices(probe); !devices.ok()) {
      std::printf("sharing_bench: no usable CUDA driver (%s): skipped\n",
                  devices.status().ToString().c_str());
      return 0;
    }
  }
  if (absl::StrContains(driver, "libfake")) {
    std::printf(
        "################################################################\n"
        "# FAKE driver (%s):\n"
        "# the CPU emulation of tests/fake_gpu, NOT a GPU.\n"
        "################################################################\n",
        driver.c_str());
  }
  const absl::Duration window = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::printf(
      "sharing_bench: tenants alice (weight 2) and bob (weight 1), %s per "
      "figure; SM-bound work: spin_ns over %d blocks of %llu ns\n\n",
      absl::FormatDuration(window).c_str(), absl::GetFlag(FLAGS_blocks),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_block_ns)));
  for (v1::GpuSharing mode :
       {v1::GPU_SHARING_SM_PARTITIONS, v1::GPU_SHARING_SHARED_CONTEXT}) {
    const ShareFigures f = MeasureShares(mode, window);
    std::printf(
        "%-48s alice %7.1f  bob %7.1f launches/s  alice:bob %.2f%s\n",
        absl::StrCat("SM-bound work, ", v1::GpuSharing_Name(mode)).c_str(),
        f.alice, f.bob, f.bob == 0 ? 0.0 : f.alice / f.bob,
        mode == v1::GPU_SHARING_SM_PARTITIONS ? "  (goal 2.00)" : "");
  }
  for (v1::GpuSharing mode :
       {v1::GPU_SHARING_CONTEXT_PER_TENANT, v1::GPU_SHARING_SHARED_CONTEXT}) {
    const FaultFigures f = MeasureFaultIsolation(mode, window);
    std::printf(
        "%-48s alice %5d faults  bob %6lld verified rounds, %lld errors%s\n",
        absl::StrCat("fault isolation, ", v1::GpuSharing_Name(mode)).c_str(),
        f.faults, static_cast<long long>(f.bob_rounds),
        static_cast<long long>(f.bob_errors),
        mode == v1::GPU_SHARING_CONTEXT_PER_TENANT ? "  (goal 0 errors)" : "");
  }
  return 0;
}

}  // namespace
}  // namespace gpustream::bench

int main(int argc, char** argv) {
  gpustream::util::UseReleaseMutexes();
  return gpustream::bench::Main(argc, argv);
}
