// gpu_bench: the CUDA backend through gpustreamd against the CUDA driver
// used directly, side by side in one run on device 0:
//   1. noop launch rate: cuLaunchKernel into one non-blocking stream, against
//      pipelined launches on the daemon's Submit stream;
//   2. flag-gated start: a host store releases a stream parked on
//      cuStreamWaitValue64, which runs add_u64 and writes a word the host
//      spins on, against flag.signal() releasing a queue parked on
//      wait_for_host_value() that runs add_u64 and write_flag(), observed by
//      flag.wait();
//   3. queue.synchronize() on an idle queue against the gRPC echo floor.
// The daemon runs in this process (as in gpustream_bench) on the devices
// that CreateDevices opens with --cuda_driver; the client is the C++ client
// over a unix socket. Without a loadable driver it says why and exits 0.
#include <cuda.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "server/backend/backend_factory.h"
#include "server/backend/cuda/cuda_backend.h"
#include "server/backend/cuda/cuda_driver.h"
#include "server/backend/cuda/cuda_status.h"
#include "server/usage.h"
#include "server/version.h"

ABSL_FLAG(std::string, cuda_driver, "libcuda.so.1",
          "The CUDA driver library: a file name searched as dlopen does, or "
          "a path (bazel-bin/tests/fake_cuda/libfakecuda.so: the fake)");
ABSL_FLAG(int, launches, 200000, "Launches per launch-rate figure");
ABSL_FLAG(int, round_trips, 2000,
          "Rounds per latency figure (flag-gated starts, synchronize round "
          "trips)");
ABSL_FLAG(bool, probe, false,
          "Only open the driver and device 0 and print what was found: exit "
          "0 where CUDA is usable, 1 where not (for scripts)");

namespace gpustream::bench {
namespace {

using backend::CudaDriver;
using backend::ToStatus;

// The whole run's bound: a wedged driver or daemon ends the run with a
// message rather than hanging whoever runs it.
constexpr absl::Duration kWatchdog = absl::Minutes(6);
// Each loop's bound: past it a figure counts the rounds done so far, so a
// slow device (or the fake driver) cannot stretch the run.
constexpr absl::Duration kFigureBudget = absl::Seconds(60);
// The longest one gated start may take before the round counts as lost.
constexpr absl::Duration kStartLimit = absl::Seconds(5);
// The longest a drain (a synchronize after queued work) may take.
constexpr absl::Duration kDrainLimit = absl::Minutes(2);
// Between enqueuing gated work and releasing it: both sides then release a
// stream already parked on its wait, as a pipeline that stages work ahead
// does, and the figure is the release alone.
constexpr absl::Duration kSettle = absl::Microseconds(200);

std::string Thousands(double value) {
  std::string digits = absl::StrFormat("%.0f", value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The driver used directly: device 0's primary context (current on the
// calling thread), the embedded samples fatbin, one non-blocking stream.
class Native {
 public:
  // An error says why CUDA cannot be measured here (no driver, no device,
  // no fatbin in this build); the caller skips with it.
  static absl::StatusOr<std::unique_ptr<Native>> Open(const std::string& path);
  ~Native();

  std::string Describe() const { return description_; }
  // Launches/s of `n` noop launches and one cuStreamSynchronize.
  absl::StatusOr<double> NoopLaunchRate(int n);
  // Microseconds from the host's store of the go word to the host seeing
  // the done word that the stream writes after add_u64, per round.
  absl::StatusOr<std::vector<double>> FlagGatedStartUs(int rounds);

 private:
  Native() = default;
  absl::Status Check(CUresult r, const char* call) const {
    return ToStatus(r, call, driver_.get());
  }

  std::unique_ptr<CudaDriver> driver_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction noop_ = nullptr;
  CUfunction add_u64_ = nullptr;
  CUstream stream_ = nullptr;
  std::string description_;
};

absl::StatusOr<std::unique_ptr<Native>> Native::Open(const std::string& path) {
  auto driver = CudaDriver::Load(path);
  if (!driver.ok()) return driver.status();
  std::unique_ptr<Native> n(new Native());
  n->driver_ = *std::move(driver);
  const CudaDriver& d = *n->driver_;
  int count = 0;
  if (absl::Status s = n->Check(d.cuInit(0), "cuInit"); !s.ok()) return s;
  if (absl::Status s = n->Check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
      !s.ok()) {
    return s;
  }
  if (count == 0) return absl::UnavailableError("no CUDA device");
  if (absl::Status s = n->Check(d.cuDeviceGet(&n->device_, 0), "cuDeviceGet");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          n->Check(d.cuDevicePrimaryCtxRetain(&n->context_, n->device_),
                   "cuDevicePrimaryCtxRetain");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          n->Check(d.cuCtxSetCurrent(n->context_), "cuCtxSetCurrent");
      !s.ok()) {
    return s;
  }
  // The very image the daemon serves, so both sides run the same kernels.
  const backend::EmbeddedModule samples = backend::CudaEmbeddedSamples();
  if (samples.image.empty()) {
    return absl::UnimplementedError(
        "this build has no CUDA samples fatbin (nvcc was not found when it "
        "was built)");
  }
  if (absl::Status s =
          n->Check(d.cuModuleLoadData(&n->module_, samples.image.data()),
                   "cuModuleLoadData");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          n->Check(d.cuModuleGetFunction(&n->noop_, n->module_, "noop"),
                   "cuModuleGetFunction(noop)");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          n->Check(d.cuModuleGetFunction(&n->add_u64_, n->module_, "add_u64"),
                   "cuModuleGetFunction(add_u64)");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = n->Check(
          d.cuStreamCreateWithPriority(&n->stream_, CU_STREAM_NON_BLOCKING, 0),
          "cuStreamCreateWithPriority");
      !s.ok()) {
    return s;
  }
  char name[256] = {};
  d.cuDeviceGetName(name, sizeof(name) - 1, n->device_);
  int major = 0, minor = 0, version = 0;
  d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                         n->device_);
  d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                         n->device_);
  d.cuDriverGetVersion(&version);
  // The library's file name: a full path would swamp the summary line.
  n->description_ = absl::StrFormat(
      "%s (sm_%d%d), CUDA driver %d.%d [%s]", name, major, minor,
      version / 1000, version % 1000 / 10, path.substr(path.rfind('/') + 1));
  return n;
}

Native::~Native() {
  if (driver_ == nullptr || context_ == nullptr) return;
  const CudaDriver& d = *driver_;
  d.cuCtxSetCurrent(context_);
  if (stream_ != nullptr) {
    d.cuStreamSynchronize(stream_);
    d.cuStreamDestroy(stream_);
  }
  if (module_ != nullptr) d.cuModuleUnload(module_);
  d.cuDevicePrimaryCtxRelease(device_);
}

absl::StatusOr<double> Native::NoopLaunchRate(int n) {
  const CudaDriver& d = *driver_;
  auto launch = [&] {
    return Check(
        d.cuLaunchKernel(noop_, 1, 1, 1, 1, 1, 1, 0, stream_, nullptr, nullptr),
        "cuLaunchKernel(noop)");
  };
  for (int i = 0; i < 1000; ++i) {  // Warm-up, outside the timing.
    if (absl::Status s = launch(); !s.ok()) return s;
  }
  if (absl::Status s =
          Check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize");
      !s.ok()) {
    return s;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<int> launched = RepeatUntil(n, start + kFigureBudget, launch);
  if (!launched.ok()) return launched.status();
  if (absl::Status s =
          Check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize");
      !s.ok()) {
    return s;
  }
  return *launched / absl::ToDoubleSeconds(absl::Now() - start);
}

absl::StatusOr<std::vector<double>> Native::FlagGatedStartUs(int rounds) {
  const CudaDriver& d = *driver_;
  int mem_ops = 0;
  d.cuDeviceGetAttribute(
      &mem_ops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device_);
  if (mem_ops == 0) {
    return absl::UnimplementedError(
        "the device has no 64-bit stream memory operations "
        "(cuStreamWaitValue64)");
  }
  // The go and done words in pinned, device-mapped host memory, one 64-byte
  // line each, so the host's spinning on `done` never shares a line with
  // its store to `go`; the counter in device memory. The daemon keeps its
  // flags and buffers the same way.
  constexpr size_t kLine = 64;
  void* host = nullptr;
  CUdeviceptr counter = 0;
  absl::Cleanup release = [&] {
    d.cuStreamSynchronize(stream_);  // Nothing queued may still use them.
    if (host != nullptr) d.cuMemFreeHost(host);
    if (counter != 0) d.cuMemFree(counter);
  };
  if (absl::Status s =
          Check(d.cuMemHostAlloc(&host, 2 * kLine, CU_MEMHOSTALLOC_DEVICEMAP),
                "cuMemHostAlloc");
      !s.ok()) {
    return s;
  }
  CUdeviceptr go = 0;
  if (absl::Status s = Check(d.cuMemHostGetDevicePointer(&go, host, 0),
                             "cuMemHostGetDevicePointer");
      !s.ok()) {
    return s;
  }
  const CUdeviceptr done = go + kLine;
  auto word = [&](int i) {
    return std::atomic_ref<uint64_t>(
        *reinterpret_cast<uint64_t*>(static_cast<char*>(host) + i * kLine));
  };
  word(0).store(0);
  word(1).store(0);
  if (absl::Status s =
          Check(d.cuMemAlloc(&counter, sizeof(uint64_t)), "cuMemAlloc");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          Check(d.cuMemsetD32Async(counter, 0, 2, stream_), "cuMemsetD32Async");
      !s.ok()) {
    return s;
  }
  uint64_t one = 1;
  void* add_args[] = {&counter, &one};

  std::vector<double> us;
  const absl::Time deadline = absl::Now() + kFigureBudget;
  for (uint64_t r = 1; r <= static_cast<uint64_t>(rounds); ++r) {
    if (absl::Now() >= deadline) break;
    absl::Status s =
        Check(d.cuStreamWaitValue64(stream_, go, r, CU_STREAM_WAIT_VALUE_EQ),
              "cuStreamWaitValue64");
    if (s.ok()) {
      s = Check(d.cuLaunchKernel(add_u64_, 1, 1, 1, 1, 1, 1, 0, stream_,
                                 add_args, nullptr),
                "cuLaunchKernel(add_u64)");
    }
    // Default flags: the store is ordered after the kernel's writes.
    if (s.ok()) {
      s = Check(d.cuStreamWriteValue64(stream_, done, r, 0),
                "cuStreamWriteValue64");
    }
    if (!s.ok()) {
      word(0).store(r);  // Releases whatever was enqueued before the error.
      return s;
    }
    absl::SleepFor(kSettle);
    const absl::Time start = absl::Now();
    word(0).store(r);
    for (uint64_t spins = 1; word(1).load(std::memory_order_acquire) != r;
         ++spins) {
      if (spins % 4096 == 0 && absl::Now() - start > kStartLimit) {
        return absl::DeadlineExceededError(
            absl::StrCat("round ", r, ": the done word was not written within ",
                         absl::FormatDuration(kStartLimit)));
      }
    }
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  uint64_t count = 0;
  if (absl::Status s =
          Check(d.cuMemcpyDtoHAsync(&count, counter, sizeof(count), stream_),
                "cuMemcpyDtoHAsync");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          Check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize");
      !s.ok()) {
    return s;
  }
  if (count != us.size()) {
    return absl::InternalError(absl::StrCat("add_u64 ran ", count, " times in ",
                                            us.size(), " rounds"));
  }
  return us;
}

// The daemon's side of figure 2 on a session of `c`: per round, a queue
// gated by wait_for_host_value(go, r) runs add_u64 and write_flag(done, r);
// the time from go.signal(r) to done.wait(r) returning.
std::vector<double> DaemonFlagGatedStartUs(BenchClient& c, int rounds) {
  client::Session& session = *c.session;
  client::Queue gated = session.create_queue();
  client::Flag go = session.create_flag();
  client::Flag done = session.create_flag();
  auto counter = session.allocate(sizeof(uint64_t));
  Check(counter.status(), "allocate");
  gated.fill(*counter, 0, sizeof(uint64_t), 0);
  Check(gated.synchronize(kDrainLimit), "fill");

  std::vector<double> us;
  const absl::Time deadline = absl::Now() + kFigureBudget;
  for (uint64_t r = 1; r <= static_cast<uint64_t>(rounds); ++r) {
    if (absl::Now() >= deadline) break;
    gated.wait_for_host_value(go, r);
    gated.launch("samples", "add_u64", {1}, {1}, {*counter, uint64_t{1}});
    gated.write_flag(done, r);
    // A round trip behind them on the same Submit stream: the daemon has
    // taken the gated work before the clock starts.
    Check(session.default_queue().synchronize(kDrainLimit), "staging");
    absl::SleepFor(kSettle);
    const absl::Time start = absl::Now();
    Check(go.signal(r), "flag.signal");
    auto seen = done.wait(r, client::WaitCondition::kEqual, kStartLimit);
    Check(seen.status(), "flag.wait");
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  Check(gated.synchronize(kDrainLimit), "gated queue");
  auto count = gated.read<uint64_t>(*counter, 1);
  Check(count.status(), "read counter");
  Check((*count)[0] == us.size(), "add_u64 once per round");
  return us;
}

struct Figures {
  double native_launches = 0, daemon_launches = 0;
  std::vector<double> native_start_us, daemon_start_us;
  std::string native_start_skipped;
  SyncFigures sync;
};

void PrintSummary(const Figures& f, const std::string& device, bool fake) {
  const int launches = absl::GetFlag(FLAGS_launches);
  const int rounds = absl::GetFlag(FLAGS_round_trips);
  std::vector<double> native = f.native_start_us, daemon = f.daemon_start_us;
  const double native_us = Median(native), daemon_us = Median(daemon);
  std::printf("\n---- summary (paste into a README table) ----\n");
  std::printf("%s%s; %ld cores; daemon in-process, client over a unix socket\n",
              device.c_str(),
              fake ? " -- FAKE driver (CPU emulation), not a GPU" : "",
              sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("\n| figure | native CUDA | gpustreamd | ratio |\n");
  std::printf("|---|---|---|---|\n");
  std::printf("| noop launches, %s, 1 stream | %s /s | %s /s | %.2fx |\n",
              Thousands(launches).c_str(), Thousands(f.native_launches).c_str(),
              Thousands(f.daemon_launches).c_str(),
              f.daemon_launches / f.native_launches);
  if (f.native_start_skipped.empty()) {
    // Rounds differ only where a side ran out of its time budget.
    const std::string rounds_done =
        f.native_start_us.size() == f.daemon_start_us.size()
            ? Thousands(f.daemon_start_us.size())
            : absl::StrCat(Thousands(f.native_start_us.size()), " / ",
                           Thousands(f.daemon_start_us.size()));
    std::printf(
        "| flag-gated start to host-visible result, median of %s | %.1f µs "
        "| %.1f µs | %.2fx |\n",
        rounds_done.c_str(), native_us, daemon_us, daemon_us / native_us);
  } else {
    std::printf(
        "| flag-gated start to host-visible result, median of %s | n/a | "
        "%.1f µs | |\n",
        Thousands(f.daemon_start_us.size()).c_str(), daemon_us);
  }
  std::printf(
      "| idle-queue `queue.synchronize()`, median of %s | %.1f µs (gRPC "
      "echo) | %.1f µs | %.2fx echo |\n",
      Thousands(rounds).c_str(), f.sync.echo.median_us,
      f.sync.sync_stream.median_us,
      f.sync.sync_stream.median_us / f.sync.echo.median_us);
  std::printf("\ntarget on a GPU: daemon launch rate >= native: %s (%.2fx)%s\n",
              f.daemon_launches >= f.native_launches ? "met" : "NOT met",
              f.daemon_launches / f.native_launches,
              fake ? " [fake driver: says nothing about a GPU]" : "");
}

int Run() {
  // Line by line, so that a log (or a pipe to tee) shows each figure as it
  // comes and in order with errors on stderr.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::thread([] {
    absl::SleepFor(kWatchdog);
    std::fprintf(stderr, "gpu_bench: still running after %s: giving up\n",
                 absl::FormatDuration(kWatchdog).c_str());
    std::fflush(stdout);
    _exit(3);
  }).detach();

  const std::string driver_path = absl::GetFlag(FLAGS_cuda_driver);
  const int launches = absl::GetFlag(FLAGS_launches);
  const int rounds = absl::GetFlag(FLAGS_round_trips);
  const bool fake = absl::StrContains(driver_path, "fakecuda");
  const bool probe = absl::GetFlag(FLAGS_probe);
  auto native = Native::Open(driver_path);
  if (!native.ok()) {
    std::printf("gpu_bench: %s\n", native.status().ToString().c_str());
    std::printf("gpu_bench: no CUDA driver: skipped\n");
    return probe ? 1 : 0;
  }
  if (probe) {
    std::printf("gpu_bench: %s\n", (*native)->Describe().c_str());
    return 0;
  }
  if (fake) {
    std::printf(
        "################################################################\n"
        "# FAKE CUDA driver (%s):\n"
        "# the CPU emulation of tests/fake_cuda, NOT a GPU. These figures\n"
        "# measure the daemon's overhead on this machine's CPUs only.\n"
        "################################################################\n",
        driver_path.c_str());
  }
  auto devices =
      backend::CreateDevices({.backend = "cuda", .cuda_driver = driver_path});
  Check(devices.status(), "CreateDevices(cuda)");
  InProcessDaemon daemon(std::move(devices->devices), "gpustream-gpu-bench");
  BenchClient c = ConnectBenchClient(daemon.unix_address());

  const std::string device = (*native)->Describe();
  std::printf(
      "gpu_bench: %s\n%d launches per rate, %d rounds per latency; daemon "
      "in this process, client over %s\n\n",
      device.c_str(), launches, rounds, daemon.unix_address().c_str());

  Figures f;
  auto native_rate = (*native)->NoopLaunchRate(launches);
  Check(native_rate.status(), "native launches");
  f.native_launches = *native_rate;
  std::printf("%-58s %12.0f launches/s\n",
              "native: cuLaunchKernel(noop), 1 stream + sync",
              f.native_launches);
  f.daemon_launches =
      SubmitNoopLaunchRate(c.session->default_queue(), launches, kFigureBudget);
  std::printf("%-58s %12.0f launches/s  (%.2fx native)\n",
              "gpustreamd: queue.launch(noop) via Submit + 1 sync",
              f.daemon_launches, f.daemon_launches / f.native_launches);

  auto native_start = (*native)->FlagGatedStartUs(rounds);
  if (native_start.ok()) {
    f.native_start_us = *std::move(native_start);
  } else if (absl::IsUnimplemented(native_start.status())) {
    f.native_start_skipped = std::string(native_start.status().message());
  } else {
    Check(native_start.status(), "native flag-gated start");
  }
  std::vector<double> sorted = f.native_start_us;
  const double native_us = Median(sorted);
  if (f.native_start_skipped.empty()) {
    std::printf("%-58s %8.1f us median of %zu\n",
                "native: store -> WaitValue64 -> add_u64 -> host sees",
                native_us, f.native_start_us.size());
  } else {
    std::printf("%-58s skipped: %s\n",
                "native: store -> WaitValue64 -> add_u64 -> host sees",
                f.native_start_skipped.c_str());
  }
  f.daemon_start_us = DaemonFlagGatedStartUs(c, rounds);
  sorted = f.daemon_start_us;
  const double daemon_us = Median(sorted);
  std::printf("%-58s %8.1f us median of %zu",
              "gpustreamd: signal -> gated add_u64 -> write_flag -> wait",
              daemon_us, f.daemon_start_us.size());
  if (f.native_start_skipped.empty()) {
    std::printf("  (%.2fx native)", daemon_us / native_us);
  }
  std::printf("\n");

  f.sync = MeasureSyncRoundTrips(c, c.session->default_queue(), rounds);
  PrintSyncFigures(f.sync, 58);

  PrintSummary(f, device, fake);
  return 0;
}

}  // namespace
}  // namespace gpustream::bench

int main(int argc, char** argv) {
  gpustream::SetUsage(
      "gpu_bench",
      "the CUDA backend through gpustreamd against the CUDA driver used "
      "directly, on device 0.\nUsage: gpu_bench [flags]");
  absl::ParseCommandLine(argc, argv);
  return gpustream::bench::Run();
}
