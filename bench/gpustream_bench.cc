// gpustream_bench: measures, side by side in one process and on the same
// transports, the gRPC unary floor (an echo), a SynchronizeQueue round trip
// on an idle queue, pipelined noop launches through Submit, the same
// launches replayed from a captured graph of 64 (LaunchGraph), and the
// launches straight into the CPU backend. Prints each figure and the ratios.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/backend/graph.h"
#include "server/metrics/metrics.h"
#include "server/modules/module_registry.h"
#include "server/usage.h"
#include "server/version.h"

ABSL_FLAG(int, round_trips, 5000, "Round trips per latency figure");
ABSL_FLAG(int, launches, 200000, "Launches per throughput figure");
ABSL_FLAG(int, lone_launches, 500, "Lone launches timed enqueue to completion");
ABSL_FLAG(bool, in_process_only, false,
          "Measure the CPU backend in-process only (no daemon, no RPC): for "
          "profiling the backend");
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
struct LoneLaunch {
  double median_us;
  double p99_us;
};
LoneLaunch LoneLaunchLatency(BenchClient& c, client::Queue& queue, int n) {
  client::Flag flag = c.session->create_flag();
  Check(queue.synchronize(absl::Seconds(10)), "creating the flag");
  std::vector<double> us;
  us.reserve(n);
  for (int i = 1; i <= n; ++i) {
    absl::Time done;
    std::thread waiter([&] {
      v1::WaitFlagRequest request;
      request.set_session_id(c.session->id());
      request.set_flag_id(flag.id());
      request.set_value(i);
      request.set_timeout_ms(10000);
      v1::WaitFlagResponse response;
      grpc::ClientContext context;
      Check(c.client->stub().WaitFlag(&context, request, &response).ok(),
            "waiting for the flag");
      done = absl::Now();
    });
    absl::SleepFor(absl::Milliseconds(2));  // Let the wait park.
    const absl::Time start = absl::Now();
    queue.launch("samples", "noop", {1}, {1}, {});
    queue.write_flag(flag, i);
    waiter.join();
    us.push_back(absl::ToDoubleMicroseconds(done - start));
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

struct TransportFigures {
  SyncFigures sync;
  double launches_per_s;
  double graph_launches_per_s;  // Effective: 64 per LaunchGraph.
  LoneLaunch lone;
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
  return f;
}

int Run() {
  std::vector<std::unique_ptr<backend::Device>> devices;
  devices.push_back(
      std::make_unique<backend::CpuDevice>(backend::CpuDeviceOptions{}));
  std::unique_ptr<metrics::Metrics> metrics;
  if (absl::GetFlag(FLAGS_metrics)) {
    metrics = std::make_unique<metrics::Metrics>("bench");
  }
  InProcessDaemon daemon(std::move(devices), "gpustream-bench", metrics.get());

  const int launches = absl::GetFlag(FLAGS_launches);
  const double in_process = InProcessLaunchRate(launches);
  std::printf(
      "gpustream_bench: %d round trips per latency, %d launches per "
      "rate; client and server share this process (%ld cores); metrics "
      "%s\n\n",
      absl::GetFlag(FLAGS_round_trips), launches, sysconf(_SC_NPROCESSORS_ONLN),
      metrics ? "on" : "off");
  std::printf("%-48s %12.0f launches/s\n",
              "noop launches straight into the CPU backend", in_process);
  std::printf("%-48s %12.0f launches/s\n",
              "64-noop graphs straight into the CPU backend",
              InProcessGraphLaunchRate(launches, kGraphSize));
  if (absl::GetFlag(FLAGS_in_process_only)) return 0;
  const char* names[] = {"unix socket", "TCP 127.0.0.1"};
  for (int t = 0; t < 2; ++t) {
    TransportFigures f = MeasureTransport(daemon.addresses()[t]);
    std::printf("\n[%s]\n", names[t]);
    PrintSyncFigures(f.sync, 48);
    std::printf("%-48s %12.0f launches/s  (%.2fx in-process)\n",
                "pipelined noop launches via Submit + 1 sync", f.launches_per_s,
                f.launches_per_s / in_process);
    std::printf("%-48s %12.0f launches/s  (%.2fx one by one)\n",
                "64-noop graph via LaunchGraph + 1 sync (effective)",
                f.graph_launches_per_s,
                f.graph_launches_per_s / f.launches_per_s);
    std::printf("%-48s %9.0f µs median, %.0f µs p99\n",
                "lone launch: enqueue -> completion seen by host",
                f.lone.median_us, f.lone.p99_us);
  }
  return 0;
}

}  // namespace
}  // namespace gpustream::bench

int main(int argc, char** argv) {
  gpustream::SetUsage(
      "gpustream_bench",
      "gRPC floor, SynchronizeQueue round trips and pipelined launches, side "
      "by side.\nUsage: gpustream_bench [flags]");
  absl::ParseCommandLine(argc, argv);
  return gpustream::bench::Run();
}
