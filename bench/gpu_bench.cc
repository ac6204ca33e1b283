// gpu_bench: a GPU backend (--backend=cuda or hip) through gpustreamd
// against the same vendor's driver used directly, side by side in one run on
// device 0:
//   1. noop launch rate: launches into one non-blocking stream, against
//      pipelined launches on the daemon's Submit stream; and a graph of 64
//      noops captured natively and launched in a loop against the same
//      graph captured through the daemon and launched pipelined
//      (LaunchGraph: one graph launch each);
//   2. flag-gated start (CUDA): a host store releases a stream parked on
//      cuStreamWaitValue64, which runs add_u64 and writes a word the host
//      spins on, against flag.signal() releasing a queue parked on
//      wait_for_host_value() that runs add_u64 and write_flag(), observed by
//      flag.wait() (HIP: the daemon's side only; HIP 5.x has no stream wait
//      worth parking on);
//   3. queue.synchronize() on an idle queue against the gRPC echo floor.
// The direct side goes through the GPU layer's driver interface
// (server/backend/gpu/gpu_driver.h), as the daemon's devices do. The daemon
// runs in this process (as in gpustream_bench) on the devices that
// CreateDevices opens; the client is the C++ client over a unix socket.
// Without a loadable driver it says why and exits 0.
#include <unistd.h>

#include <algorithm>
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
#include "server/backend/gpu/gpu_driver.h"
#include "server/usage.h"
#include "server/util/release_mutexes.h"
#include "server/version.h"

ABSL_FLAG(std::string, backend, "cuda", "The GPU backend: cuda or hip");
ABSL_FLAG(std::string, cuda_driver, "libcuda.so.1",
          "The CUDA driver library: a file name searched as dlopen does, or "
          "a path (bazel-bin/tests/fake_cuda/libfakecuda.so: the fake)");
ABSL_FLAG(std::string, hip_runtime, "",
          "The HIP runtime library (empty: libamdhip64.so.6, then .so.5), or "
          "a path (bazel-bin/tests/fake_hip/libfakehip.so: the fake)");
ABSL_FLAG(int, launches, 200000, "Launches per launch-rate figure");
ABSL_FLAG(std::string, samples_dir, "",
          "Where to write gpu_bench.json (the launch rates) for "
          "tools/plot_bench.py; empty: nowhere");
ABSL_FLAG(int, round_trips, 2000,
          "Rounds per latency figure (flag-gated starts, synchronize round "
          "trips)");
ABSL_FLAG(bool, probe, false,
          "Only open the driver and device 0 and print what was found: exit "
          "0 where the backend is usable, 1 where not (for scripts)");

namespace gpustream::bench {
namespace {

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

// The driver used directly, through the GPU layer's driver interface as the
// daemon's devices use it: device 0's primary context (current on the
// calling thread), the embedded samples module, one stream.
class Native {
 public:
  // An error says why the vendor cannot be measured here (no driver, no
  // device, no samples module in this build); the caller skips with it.
  static absl::StatusOr<std::unique_ptr<Native>> Open(
      const backend::BackendOptions& options);
  ~Native();

  std::string Describe() const { return description_; }
  const std::string& vendor() const { return vendor_; }
  // Launches/s of `n` noop launches and one stream synchronize.
  absl::StatusOr<double> NoopLaunchRate(int n);
  // Noop launches per second from an executable graph of `per_graph`
  // noops, launched n / per_graph times. UNIMPLEMENTED where the driver
  // interface does not capture.
  absl::StatusOr<double> GraphNoopLaunchRate(int n, int per_graph);
  // Microseconds from the host's store of the go word to the host seeing
  // the done word that the stream writes after add_u64, per round.
  // UNIMPLEMENTED where the driver has no stream wait worth measuring.
  absl::StatusOr<std::vector<double>> FlagGatedStartUs(int rounds);

 private:
  Native() = default;

  backend::DirectGpuDriver direct_;
  const backend::GpuDriver* d_ = nullptr;        // direct_.driver
  backend::GpuContextHandle context_ = nullptr;  // retained
  backend::GpuModuleHandle module_ = nullptr;
  backend::GpuFunctionHandle noop_ = nullptr;
  backend::GpuFunctionHandle add_u64_ = nullptr;
  backend::GpuStreamHandle stream_ = nullptr;
  std::string vendor_;
  std::string description_;
};

absl::StatusOr<std::unique_ptr<Native>> Native::Open(
    const backend::BackendOptions& options) {
  auto direct = backend::OpenDirectGpuDriver(options);
  if (!direct.ok()) return direct.status();
  std::unique_ptr<Native> n(new Native());
  n->direct_ = *std::move(direct);
  n->d_ = n->direct_.driver.get();
  const backend::GpuDriver& d = *n->d_;
  n->vendor_ = d.traits().display_name;
  absl::StatusOr<int> count = d.DeviceCount();
  if (!count.ok()) return count.status();
  if (*count == 0) return absl::UnavailableError("no device");
  absl::StatusOr<backend::GpuContextHandle> context = d.PrimaryContextRetain(0);
  if (!context.ok()) return context.status();
  n->context_ = *context;
  if (absl::Status s = d.SetCurrent(n->context_); !s.ok()) return s;
  absl::StatusOr<backend::GpuDeviceProperties> properties =
      d.DeviceProperties(0);
  if (!properties.ok()) return properties.status();
  // The very image the daemon serves, so both sides run the same kernels.
  const backend::EmbeddedModule& samples = n->direct_.samples;
  if (samples.image.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "this build has no ", n->vendor_,
        " samples module (its compiler was not found when it was built)"));
  }
  auto module = d.ModuleLoad(samples.image, properties->target_id);
  if (!module.ok()) return module.status();
  n->module_ = *module;
  auto noop = d.ModuleFunction(n->module_, "noop");
  if (!noop.ok()) return noop.status();
  n->noop_ = *noop;
  auto add_u64 = d.ModuleFunction(n->module_, "add_u64");
  if (!add_u64.ok()) return add_u64.status();
  n->add_u64_ = *add_u64;
  auto stream = d.StreamCreate(0);
  if (!stream.ok()) return stream.status();
  n->stream_ = *stream;
  const backend::DeviceInfo& info = properties->info;
  // "<library> (<vendor> <version>)", with the library's file name, not its
  // path: a path would swamp the summary.
  std::string driver = d.Describe();
  driver.erase(0, driver.rfind('/', driver.find(' ')) + 1);
  n->description_ = absl::StrCat(info.name,
                                 absl::StrContains(info.name, info.arch)
                                     ? ""
                                     : absl::StrCat(" (", info.arch, ")"),
                                 ", ", driver);
  return n;
}

Native::~Native() {
  if (d_ == nullptr || context_ == nullptr) return;
  // The daemon's devices made their own contexts current on this thread.
  (void)d_->SetCurrent(context_);
  if (stream_ != nullptr) {
    (void)d_->StreamSynchronize(stream_);
    (void)d_->StreamDestroy(stream_);
  }
  if (module_ != nullptr) (void)d_->ModuleUnload(module_);
  (void)d_->PrimaryContextRelease(0);
}

absl::StatusOr<double> Native::NoopLaunchRate(int n) {
  auto launch = [&] {
    return d_->LaunchKernel(noop_, backend::LaunchConfig{}, stream_, nullptr);
  };
  for (int i = 0; i < 1000; ++i) {  // Warm-up, outside the timing.
    if (absl::Status s = launch(); !s.ok()) return s;
  }
  if (absl::Status s = d_->StreamSynchronize(stream_); !s.ok()) return s;
  const absl::Time start = absl::Now();
  absl::StatusOr<int> launched = RepeatUntil(n, start + kFigureBudget, launch);
  if (!launched.ok()) return launched.status();
  if (absl::Status s = d_->StreamSynchronize(stream_); !s.ok()) return s;
  return *launched / absl::ToDoubleSeconds(absl::Now() - start);
}

absl::StatusOr<double> Native::GraphNoopLaunchRate(int n, int per_graph) {
  if (!d_->traits().graphs) {
    return absl::UnimplementedError(
        absl::StrCat(vendor_, ": the driver interface does not capture"));
  }
  if (absl::Status s = d_->StreamBeginCapture(stream_); !s.ok()) return s;
  absl::Status captured;
  for (int i = 0; i < per_graph && captured.ok(); ++i) {
    captured =
        d_->LaunchKernel(noop_, backend::LaunchConfig{}, stream_, nullptr);
  }
  absl::StatusOr<backend::GpuGraphExecHandle> exec =
      d_->StreamEndCapture(stream_);
  if (!captured.ok()) return captured;
  if (!exec.ok()) return exec.status();
  absl::Cleanup destroy = [&] { d_->GraphExecDestroy(*exec).IgnoreError(); };
  auto launch = [&] { return d_->GraphLaunch(*exec, stream_); };
  for (int i = 0; i < 100; ++i) {  // Warm-up, outside the timing.
    if (absl::Status s = launch(); !s.ok()) return s;
  }
  if (absl::Status s = d_->StreamSynchronize(stream_); !s.ok()) return s;
  const absl::Time start = absl::Now();
  absl::StatusOr<int> launched =
      RepeatUntil(std::max(1, n / per_graph), start + kFigureBudget, launch);
  if (!launched.ok()) return launched.status();
  if (absl::Status s = d_->StreamSynchronize(stream_); !s.ok()) return s;
  return static_cast<double>(*launched) * per_graph /
         absl::ToDoubleSeconds(absl::Now() - start);
}

absl::StatusOr<std::vector<double>> Native::FlagGatedStartUs(int rounds) {
  if (direct_.wait_value_eq == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        vendor_,
        " runs a stream's wait on a host word as a spinning kernel on a "
        "shared hardware queue; the daemon holds such waits itself"));
  }
  absl::StatusOr<backend::GpuDeviceProperties> properties =
      d_->DeviceProperties(0);
  if (!properties.ok()) return properties.status();
  if (!properties->info.supports_wait_value) {
    return absl::UnimplementedError(
        "the device has no 64-bit stream memory operations");
  }
  // The go and done words in pinned, device-mapped host memory, one 64-byte
  // line each, so the host's spinning on `done` never shares a line with
  // its store to `go`; the counter in device memory. The daemon keeps its
  // flags and buffers the same way.
  constexpr size_t kLine = 64;
  void* host = nullptr;
  backend::GpuDeviceptr counter = 0;
  absl::Cleanup release = [&] {
    (void)d_->StreamSynchronize(stream_);  // Nothing queued may use them.
    if (host != nullptr) (void)d_->HostFree(host);
    if (counter != 0) (void)d_->MemFree(counter);
  };
  absl::StatusOr<void*> pinned = d_->HostAlloc(2 * kLine, /*mapped=*/true);
  if (!pinned.ok()) return pinned.status();
  host = *pinned;
  absl::StatusOr<backend::GpuDeviceptr> go = d_->HostDevicePointer(host);
  if (!go.ok()) return go.status();
  const backend::GpuDeviceptr done = *go + kLine;
  auto word = [&](int i) {
    return std::atomic_ref<uint64_t>(
        *reinterpret_cast<uint64_t*>(static_cast<char*>(host) + i * kLine));
  };
  word(0).store(0);
  word(1).store(0);
  absl::StatusOr<backend::GpuDeviceptr> allocated =
      d_->MemAlloc(sizeof(uint64_t));
  if (!allocated.ok()) return allocated.status();
  counter = *allocated;
  if (absl::Status s = d_->MemsetD32Async(counter, 0, 2, stream_); !s.ok()) {
    return s;
  }
  uint64_t one = 1;
  void* add_args[] = {&counter, &one};

  std::vector<double> us;
  const absl::Time deadline = absl::Now() + kFigureBudget;
  for (uint64_t r = 1; r <= static_cast<uint64_t>(rounds); ++r) {
    if (absl::Now() >= deadline) break;
    absl::Status s = direct_.wait_value_eq(stream_, *go, r);
    if (s.ok()) {
      s = d_->LaunchKernel(add_u64_, backend::LaunchConfig{}, stream_,
                           add_args);
    }
    // Ordered after the kernel's writes.
    if (s.ok()) s = d_->StreamWriteValue64(stream_, done, r);
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
          d_->MemcpyDtoHAsync(&count, counter, sizeof(count), stream_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = d_->StreamSynchronize(stream_); !s.ok()) return s;
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
  double native_launches = 0, daemon_launches = 0, graph_launches = 0;
  double native_graph_launches = 0;  // 0: the driver does not capture.
  std::vector<double> native_start_us, daemon_start_us;
  std::string native_start_skipped;
  SyncFigures sync;
};

void PrintSummary(const Figures& f, const std::string& vendor,
                  const std::string& device, bool fake) {
  const int launches = absl::GetFlag(FLAGS_launches);
  const int rounds = absl::GetFlag(FLAGS_round_trips);
  std::vector<double> native = f.native_start_us, daemon = f.daemon_start_us;
  const double native_us = Median(native), daemon_us = Median(daemon);
  std::printf("\n---- summary (paste into a README table) ----\n");
  std::printf("%s%s; %ld cores; daemon in-process, client over a unix socket\n",
              device.c_str(),
              fake ? " -- FAKE driver (CPU emulation), not a GPU" : "",
              sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("\n| figure | native %s | gpustreamd | ratio |\n",
              vendor.c_str());
  std::printf("|---|---|---|---|\n");
  std::printf("| noop launches, %s, 1 stream | %s /s | %s /s | %.2fx |\n",
              Thousands(launches).c_str(), Thousands(f.native_launches).c_str(),
              Thousands(f.daemon_launches).c_str(),
              f.daemon_launches / f.native_launches);
  std::printf(
      "| noop launches replayed from a 64-noop graph (LaunchGraph), "
      "effective | %s /s | %s /s | %.2fx |\n",
      Thousands(f.native_launches).c_str(), Thousands(f.graph_launches).c_str(),
      f.graph_launches / f.native_launches);
  if (f.native_graph_launches > 0) {
    std::printf(
        "| noop launches from a 64-noop graph: native graph launch loop "
        "against LaunchGraph | %s /s | %s /s | %.2fx |\n",
        Thousands(f.native_graph_launches).c_str(),
        Thousands(f.graph_launches).c_str(),
        f.graph_launches / f.native_graph_launches);
  }
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

  if (absl::GetFlag(FLAGS_backend) != "cuda" &&
      absl::GetFlag(FLAGS_backend) != "hip") {
    std::fprintf(stderr, "gpu_bench: --backend=%s: expected cuda or hip\n",
                 absl::GetFlag(FLAGS_backend).c_str());
    return 2;
  }
  const backend::BackendOptions options{
      .backend = absl::GetFlag(FLAGS_backend),
      .cuda_driver = absl::GetFlag(FLAGS_cuda_driver),
      .hip_runtime = absl::GetFlag(FLAGS_hip_runtime)};
  const std::string driver_path =
      options.backend == "hip" ? options.hip_runtime : options.cuda_driver;
  const int launches = absl::GetFlag(FLAGS_launches);
  const int rounds = absl::GetFlag(FLAGS_round_trips);
  const bool fake = absl::StrContains(driver_path, "libfake");
  const bool probe = absl::GetFlag(FLAGS_probe);
  auto native = Native::Open(options);
  if (!native.ok()) {
    std::printf("gpu_bench: %s\n", native.status().ToString().c_str());
    std::printf("gpu_bench: no usable %s driver: skipped\n",
                options.backend.c_str());
    return probe ? 1 : 0;
  }
  if (probe) {
    std::printf("gpu_bench: %s\n", (*native)->Describe().c_str());
    return 0;
  }
  if (fake) {
    std::printf(
        "################################################################\n"
        "# FAKE driver (%s):\n"
        "# the CPU emulation of tests/fake_gpu, NOT a GPU. These figures\n"
        "# measure the daemon's overhead on this machine's CPUs only.\n"
        "################################################################\n",
        driver_path.c_str());
  }
  auto devices = backend::CreateDevices(options);
  Check(devices.status(), "CreateDevices");
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
              "native: LaunchKernel(noop), 1 stream + sync", f.native_launches);
  f.daemon_launches =
      SubmitNoopLaunchRate(c.session->default_queue(), launches, kFigureBudget);
  std::printf("%-58s %12.0f launches/s  (%.2fx native)\n",
              "gpustreamd: queue.launch(noop) via Submit + 1 sync",
              f.daemon_launches, f.daemon_launches / f.native_launches);
  auto native_graph = (*native)->GraphNoopLaunchRate(launches, 64);
  if (native_graph.ok()) {
    f.native_graph_launches = *native_graph;
    std::printf("%-58s %12.0f launches/s  (%.2fx native)\n",
                "native: 64-noop graph, graph launch loop + sync",
                f.native_graph_launches,
                f.native_graph_launches / f.native_launches);
  } else if (absl::IsUnimplemented(native_graph.status())) {
    std::printf("native: 64-noop graph: %s\n",
                std::string(native_graph.status().message()).c_str());
  } else {
    Check(native_graph.status(), "native graph launches");
  }
  f.graph_launches = GraphNoopLaunchRate(c.session->default_queue(), launches,
                                         64, kFigureBudget);
  std::printf("%-58s %12.0f launches/s  (%.2fx native)\n",
              "gpustreamd: 64-noop graph via LaunchGraph (effective)",
              f.graph_launches, f.graph_launches / f.native_launches);

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

  PrintSummary(f, (*native)->vendor(), device, fake);
  const std::string layer =
      absl::StrCat(absl::GetFlag(FLAGS_backend), fake ? "_fake" : "");
  WriteFigures(
      absl::GetFlag(FLAGS_samples_dir), "gpu_bench",
      absl::StrFormat("{\"launch_rates\": {\"submit_%s\": %.0f, "
                      "\"native_%s\": %.0f}}\n",
                      layer, f.daemon_launches, layer, f.native_launches));
  return 0;
}

}  // namespace
}  // namespace gpustream::bench

int main(int argc, char** argv) {
  gpustream::util::UseReleaseMutexes();
  gpustream::SetUsage(
      "gpu_bench",
      "a GPU backend through gpustreamd against the vendor's driver used "
      "directly, on device 0.\nUsage: gpu_bench [--backend=cuda|hip] "
      "[flags]");
  absl::ParseCommandLine(argc, argv);
  return gpustream::bench::Run();
}
