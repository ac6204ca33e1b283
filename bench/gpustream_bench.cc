// gpustream_bench: measures, side by side in one process and on the same
// transports, the gRPC unary floor (an echo), a SynchronizeQueue round trip
// on an idle queue, pipelined noop launches through Submit, the same
// launches replayed from a captured graph of 64 (LaunchGraph), and the
// launches straight into the CPU backend. Prints each figure and the ratios.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/backend/graph.h"
#include "server/metrics/metrics.h"
#include "server/modules/module_registry.h"
#include "server/usage.h"
#include "server/util/release_mutexes.h"
#include "server/version.h"

ABSL_FLAG(int, round_trips, 5000, "Round trips per latency figure");
ABSL_FLAG(int, launches, 200000, "Launches per throughput figure");
ABSL_FLAG(int, lone_launches, 500, "Lone launches timed enqueue to completion");
ABSL_FLAG(bool, in_process_only, false,
          "Measure the CPU backend in-process only (no daemon, no RPC): for "
          "profiling the backend");
ABSL_FLAG(std::string, launch_rate_only, "",
          "Measure one launch rate and nothing else: in_process (straight "
          "into the CPU backend) or submit_unix / submit_tcp (the C++ "
          "client's pipelined Submit to a daemon in this process). "
          "tools/bench.sh runs it under valgrind's callgrind at two launch "
          "counts: the difference in instructions over the difference in "
          "launches is the instructions each launch costs that layer");
ABSL_FLAG(int, data_mib, 256,
          "MiB moved per data-plane figure (WriteBuffer, ReadBuffer, "
          "CopyBuffer from HOST_SHARED memory); 0 skips them");
ABSL_FLAG(std::string, samples_dir, "",
          "Where to write gpustream_bench.json (every latency sample and "
          "the launch rates) for tools/plot_bench.py; empty: nowhere");
ABSL_FLAG(bool, metrics, false,
          "Count every call in Prometheus metrics, as gpustreamd "
          "--metrics_listen does (to measure what that costs)");

namespace gpustream::bench {
namespace {

// Noop launches per captured graph (issue: a graph of 64).
constexpr int kGraphSize = 64;

// Launches/s of `n` noops straight into a CPU queue, then one wait.
double InProcessLaunchRate(int n) {
  backend::CpuDevice device({});
  auto registry = *modules::ModuleRegistry::Create(device, {});
  const backend::Kernel& noop = **registry->Find("samples", "noop");
  auto queue = *device.CreateQueue({});
  backend::LaunchConfig config;
  const absl::Time start = absl::Now();
  absl::Status launched;  // The first failure, if any (Update keeps it).
  for (int i = 0; i < n; ++i) launched.Update(queue->Launch(noop, config, {}));
  absl::Notification idle;
  queue->OnIdle([&](absl::Status) { idle.Notify(); });
  idle.WaitForNotification();
  const double rate = n / absl::ToDoubleSeconds(absl::Now() - start);
  Check(launched, "in-process launches");
  return rate;
}

// Effective launches/s of a graph of `graph_size` noops launched about
// n / graph_size times straight into a CPU queue, then one wait: the
// backend's replay alone, without the RPC.
double InProcessGraphLaunchRate(int n, int graph_size) {
  backend::CpuDevice device({});
  auto registry = *modules::ModuleRegistry::Create(device, {});
  const backend::Kernel* noop = *registry->Find("samples", "noop");
  auto queue = *device.CreateQueue({});
  std::vector<backend::GraphCommand> commands(
      graph_size, backend::GraphLaunch{noop, {}, {}});
  auto graph = std::make_shared<const backend::Graph>(std::move(commands));
  const int launches = std::max(1, n / graph_size);
  const absl::Time start = absl::Now();
  absl::Status launched;
  for (int i = 0; i < launches; ++i)
    launched.Update(queue->LaunchGraph(graph, nullptr));
  absl::Notification idle;
  queue->OnIdle([&](absl::Status) { idle.Notify(); });
  idle.WaitForNotification();
  const double rate = double{1} * launches * graph_size /
                      absl::ToDoubleSeconds(absl::Now() - start);
  Check(launched, "in-process graph launches");
  return rate;
}

// From a lone launch's enqueue to its completion seen by a host that was
// already waiting: each round, a unary WaitFlag parks on the daemon first;
// then the queue gets a noop launch and a write_flag behind it, with no
// flush or synchronize, so the client must send them on its own. Median and
// 99th percentile in microseconds.
// A thread parked in a unary WaitFlag(flag, value) that stores when it
// returned in *done; started 2 ms ago (time for the wait to park).
std::thread ParkWaitFlag(BenchClient& c, const client::Flag& flag,
                         uint64_t value, absl::Time* done) {
  std::thread waiter([&c, id = flag.id(), value, done] {
    v1::WaitFlagRequest request;
    request.set_session_id(c.session->id());
    request.set_flag_id(id);
    request.set_value(value);
    request.set_timeout_ms(10000);
    v1::WaitFlagResponse response;
    grpc::ClientContext context;
    Check(c.client->stub().WaitFlag(&context, request, &response).ok(),
          "waiting for the flag");
    *done = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(2));
  return waiter;
}

struct LoneLaunch {
  double median_us;
  double p99_us;
  std::vector<double> samples_us;
};
LoneLaunch LoneLaunchLatency(BenchClient& c, client::Queue& queue, int n) {
  client::Flag flag = c.session->create_flag();
  Check(queue.synchronize(absl::Seconds(10)), "creating the flag");
  std::vector<double> us;
  us.reserve(n);
  for (int i = 1; i <= n; ++i) {
    absl::Time done;
    std::thread waiter = ParkWaitFlag(c, flag, i, &done);
    const absl::Time start = absl::Now();
    queue.launch("samples", "noop", {1}, {1}, {});
    queue.write_flag(flag, i);
    waiter.join();
    us.push_back(absl::ToDoubleMicroseconds(done - start));
  }
  std::vector<double> samples = us;
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100], std::move(samples)};
}

// Keeps the timed memcpy from being optimized away.
volatile char benchmark_sink;

// Seconds of the fastest of three runs of `fn`.
template <typename Fn>
double BestOfThree(Fn fn) {
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const absl::Time start = absl::Now();
    fn();
    best = std::min(best, absl::ToDoubleSeconds(absl::Now() - start));
  }
  return best;
}

// MB/s of memcpy between two `bytes` buffers already touched: the floor
// every data-plane figure is a fraction of.
double MemcpyRate(size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 2);
  const double s = BestOfThree([&] {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark_sink = dst[bytes / 2];
  });
  return bytes / s / 1e6;
}

// MB/s of 256 MiB (--data_mib) through inline WriteBuffer (the client's
// write, chunked into requests, then a synchronize), ReadBuffer, and
// CopyBuffer from a HOST_SHARED buffer the client filled through its
// mapping into DEVICE memory (copy + synchronize; 0 where the transport
// has no share socket).
struct DataPlane {
  double write_mb_s = 0;
  double read_mb_s = 0;
  double shared_copy_mb_s = 0;
};
DataPlane MeasureDataPlane(BenchClient& c, client::Queue& queue, size_t bytes,
                           bool shared) {
  DataPlane d;
  auto device = c.session->allocate(bytes);
  Check(device.status(), "allocating the data-plane buffer");
  const std::string data(bytes, 'x');
  d.write_mb_s = bytes / BestOfThree([&] {
                   queue.write(*device, 0, data);
                   Check(queue.synchronize(absl::Seconds(120)), "write");
                 }) /
                 1e6;
  d.read_mb_s = bytes / BestOfThree([&] {
                  auto read = queue.read(*device, 0, bytes);
                  Check(read.status(), "read");
                }) /
                1e6;
  if (shared) {
    auto host = c.session->allocate_shared(bytes);
    Check(host.status(), "allocate_shared");
    std::memset(host->data(), 7, bytes);
    d.shared_copy_mb_s =
        bytes / BestOfThree([&] {
          queue.copy(*host, 0, *device, 0, bytes);
          Check(queue.synchronize(absl::Seconds(120)), "shared copy");
        }) /
        1e6;
  }
  return d;
}

// SignalFlag -> a launch gated on that flag -> write_flag -> the host's
// WaitFlag returns: each round the queue already holds
// wait_for_host_value(gate, i), a noop launch and write_flag(done, i), and
// a unary WaitFlag(done, i) is parked; timed from the unary SignalFlag's
// start until the WaitFlag returns. Every round, in microseconds.
std::vector<double> GatedStartLatency(BenchClient& c, client::Queue& queue,
                                      int n) {
  client::Flag gate = c.session->create_flag();
  client::Flag done_flag = c.session->create_flag();
  Check(queue.synchronize(absl::Seconds(10)), "creating the flags");
  std::vector<double> us;
  us.reserve(n);
  for (int i = 1; i <= n; ++i) {
    queue.wait_for_host_value(gate, i);
    queue.launch("samples", "noop", {1}, {1}, {});
    queue.write_flag(done_flag, i);
    Check(c.session->flush(), "sending the gated launch");
    absl::Time done;
    std::thread waiter = ParkWaitFlag(c, done_flag, i, &done);
    v1::SignalFlagRequest signal;
    signal.set_session_id(c.session->id());
    signal.set_flag_id(gate.id());
    signal.set_value(i);
    v1::SignalFlagResponse signalled;
    grpc::ClientContext context;
    const absl::Time start = absl::Now();
    Check(c.client->stub().SignalFlag(&context, signal, &signalled).ok(),
          "signalling the gate");
    waiter.join();
    us.push_back(absl::ToDoubleMicroseconds(done - start));
  }
  return us;
}

struct TransportFigures {
  SyncFigures sync;
  std::vector<double> gated_start_us;
  double launches_per_s;
  double graph_launches_per_s;  // Effective: 64 per LaunchGraph.
  LoneLaunch lone;
  DataPlane data;
};

TransportFigures MeasureTransport(const std::string& target) {
  BenchClient c = ConnectBenchClient(target);
  client::Queue& queue = c.session->default_queue();
  TransportFigures f;
  f.sync = MeasureSyncRoundTrips(c, queue, absl::GetFlag(FLAGS_round_trips));
  f.launches_per_s = SubmitNoopLaunchRate(queue, absl::GetFlag(FLAGS_launches));
  f.graph_launches_per_s =
      GraphNoopLaunchRate(queue, absl::GetFlag(FLAGS_launches), kGraphSize);
  f.lone = LoneLaunchLatency(c, queue, absl::GetFlag(FLAGS_lone_launches));
  f.gated_start_us =
      GatedStartLatency(c, queue, absl::GetFlag(FLAGS_lone_launches));
  if (absl::GetFlag(FLAGS_data_mib) > 0) {
    f.data = MeasureDataPlane(
        c, queue, static_cast<size_t>(absl::GetFlag(FLAGS_data_mib)) << 20,
        absl::StartsWith(target, "unix:"));
  }
  return f;
}

// The in-process daemon's devices: one CPU device, default options.
std::vector<std::unique_ptr<backend::Device>> OneCpuDevice() {
  std::vector<std::unique_ptr<backend::Device>> devices;
  devices.push_back(
      std::make_unique<backend::CpuDevice>(backend::CpuDeviceOptions{}));
  return devices;
}

// --launch_rate_only: one rate, with as little else as possible around
// it (instructions are counted for the whole process).
int RunLaunchRateOnly(const std::string& layer) {
  const int launches = absl::GetFlag(FLAGS_launches);
  if (layer == "in_process") {
    std::printf("%s %.0f launches/s\n", layer.c_str(),
                InProcessLaunchRate(launches));
    return 0;
  }
  if (layer != "submit_unix" && layer != "submit_tcp") {
    std::fprintf(stderr,
                 "gpustream_bench: --launch_rate_only=%s: expected "
                 "in_process, submit_unix or submit_tcp\n",
                 layer.c_str());
    return 2;
  }
  InProcessDaemon daemon(OneCpuDevice(), "gpustream-bench", nullptr);
  BenchClient c =
      ConnectBenchClient(daemon.addresses()[layer == "submit_unix" ? 0 : 1]);
  std::printf("%s %.0f launches/s\n", layer.c_str(),
              SubmitNoopLaunchRate(c.session->default_queue(), launches));
  return 0;
}

int Run() {
  if (const std::string only = absl::GetFlag(FLAGS_launch_rate_only);
      !only.empty()) {
    return RunLaunchRateOnly(only);
  }
  std::unique_ptr<metrics::Metrics> metrics;
  if (absl::GetFlag(FLAGS_metrics)) {
    metrics = std::make_unique<metrics::Metrics>("bench");
  }
  InProcessDaemon daemon(OneCpuDevice(), "gpustream-bench", metrics.get());

  const int launches = absl::GetFlag(FLAGS_launches);
  const double in_process = InProcessLaunchRate(launches);
  std::printf(
      "gpustream_bench: %d round trips per latency, %d launches per "
      "rate; client and server share this process (%ld cores); metrics "
      "%s\n\n",
      absl::GetFlag(FLAGS_round_trips), launches, sysconf(_SC_NPROCESSORS_ONLN),
      metrics ? "on" : "off");
  std::printf("%-48s %12.0f launches/s  (goal >= 3,000,000)\n",
              "noop launches straight into the CPU backend", in_process);
  std::printf("%-48s %12.0f launches/s\n",
              "64-noop graphs straight into the CPU backend",
              InProcessGraphLaunchRate(launches, kGraphSize));
  if (absl::GetFlag(FLAGS_in_process_only)) return 0;
  double memcpy_mb_s = 0;
  if (absl::GetFlag(FLAGS_data_mib) > 0) {
    memcpy_mb_s =
        MemcpyRate(static_cast<size_t>(absl::GetFlag(FLAGS_data_mib)) << 20);
    std::printf("%-48s %12.0f MB/s\n", "memcpy, same size (data-plane floor)",
                memcpy_mb_s);
  }
  const char* names[] = {"unix socket", "TCP 127.0.0.1"};
  const char* keys[] = {"unix", "tcp"};
  std::string json =
      absl::StrFormat("{\"launch_rates\": {\"in_process\": %.0f", in_process);
  std::string latencies;
  for (int t = 0; t < 2; ++t) {
    TransportFigures f = MeasureTransport(daemon.addresses()[t]);
    absl::StrAppendFormat(&json, ", \"submit_%s\": %.0f", keys[t],
                          f.launches_per_s);
    absl::StrAppendFormat(
        &latencies,
        "%s\"%s\": {\"echo\": %s, \"bidi\": %s, \"sync_stream\": %s, "
        "\"gated_start\": %s, \"lone_launch\": %s}",
        t == 0 ? "" : ", ", keys[t], JsonArray(f.sync.echo.samples_us),
        JsonArray(f.sync.bidi.samples_us),
        JsonArray(f.sync.sync_stream.samples_us), JsonArray(f.gated_start_us),
        JsonArray(f.lone.samples_us));
    std::printf("\n[%s]\n", names[t]);
    PrintSyncFigures(f.sync, 48);
    std::printf(
        "%-48s %12.0f launches/s  (%.2fx in-process; goal >= 1,000,000)\n",
        "pipelined noop launches via Submit + 1 sync", f.launches_per_s,
        f.launches_per_s / in_process);
    std::printf("%-48s %12.0f launches/s  (%.2fx one by one)\n",
                "64-noop graph via LaunchGraph + 1 sync (effective)",
                f.graph_launches_per_s,
                f.graph_launches_per_s / f.launches_per_s);
    std::vector<double> gated = f.gated_start_us;
    const double gated_us = Median(gated);
    std::printf(
        "%-48s %9.0f µs median, %.0f µs p99  (%.2fx echo; goal <= 1.5x)\n",
        "lone launch: enqueue -> completion seen by host", f.lone.median_us,
        f.lone.p99_us, f.lone.median_us / f.sync.echo.median_us);
    std::printf(
        "%-48s %9.0f µs median  (%.2fx idle-queue synchronize; goal <= "
        "1.2x)\n",
        "SignalFlag -> gated launch -> host WaitFlag", gated_us,
        gated_us / f.sync.sync_stream.median_us);
    if (absl::GetFlag(FLAGS_data_mib) > 0) {
      const int mib = absl::GetFlag(FLAGS_data_mib);
      auto row = [&](const char* what, double mb_s, double goal) {
        std::printf("%-48s %12.0f MB/s  (%.2fx memcpy; goal >= %.1fx)\n",
                    absl::StrFormat(what, mib).c_str(), mb_s,
                    mb_s / memcpy_mb_s, goal);
      };
      row("WriteBuffer %d MiB, C++ client + 1 sync", f.data.write_mb_s, 0.3);
      row("ReadBuffer %d MiB, C++ client", f.data.read_mb_s, 0.3);
      if (f.data.shared_copy_mb_s > 0) {
        row("CopyBuffer %d MiB HOST_SHARED -> DEVICE + sync",
            f.data.shared_copy_mb_s, 0.9);
      }
    }
  }
  WriteFigures(absl::GetFlag(FLAGS_samples_dir), "gpustream_bench",
               absl::StrCat(json, "}, \"latency_us\": {", latencies, "}}\n"));
  return 0;
}

}  // namespace
}  // namespace gpustream::bench

int main(int argc, char** argv) {
  gpustream::util::UseReleaseMutexes();
  gpustream::SetUsage(
      "gpustream_bench",
      "gRPC floor, SynchronizeQueue round trips and pipelined launches, side "
      "by side.\nUsage: gpustream_bench [flags]");
  absl::ParseCommandLine(argc, argv);
  return gpustream::bench::Run();
}
