// gpustream_bench: measures, side by side in one process and on the same
// transports, the gRPC unary floor (an echo), a SynchronizeQueue round trip
// on an idle queue, pipelined noop launches through Submit, and the same
// launches straight into the CPU backend. Prints each figure and the ratios.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/modules/module_registry.h"

ABSL_FLAG(int, round_trips, 5000, "Round trips per latency figure");
ABSL_FLAG(int, launches, 200000, "Launches per throughput figure");

namespace gpustream::bench {
namespace {

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

struct TransportFigures {
  SyncFigures sync;
  double launches_per_s;
};

TransportFigures MeasureTransport(const std::string& target) {
  BenchClient c = ConnectBenchClient(target);
  client::Queue& queue = c.session->default_queue();
  TransportFigures f;
  f.sync = MeasureSyncRoundTrips(c, queue, absl::GetFlag(FLAGS_round_trips));
  f.launches_per_s = SubmitNoopLaunchRate(queue, absl::GetFlag(FLAGS_launches));
  return f;
}

int Run() {
  std::vector<std::unique_ptr<backend::Device>> devices;
  devices.push_back(
      std::make_unique<backend::CpuDevice>(backend::CpuDeviceOptions{}));
  InProcessDaemon daemon(std::move(devices), "gpustream-bench");

  const int launches = absl::GetFlag(FLAGS_launches);
  const double in_process = InProcessLaunchRate(launches);
  std::printf(
      "gpustream_bench: %d round trips per latency, %d launches per "
      "rate; client and server share this process (%ld cores)\n\n",
      absl::GetFlag(FLAGS_round_trips), launches,
      sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("%-48s %12.0f launches/s\n",
              "noop launches straight into the CPU backend", in_process);
  const char* names[] = {"unix socket", "TCP 127.0.0.1"};
  for (int t = 0; t < 2; ++t) {
    TransportFigures f = MeasureTransport(daemon.addresses()[t]);
    std::printf("\n[%s]\n", names[t]);
    PrintSyncFigures(f.sync, 48);
    std::printf("%-48s %12.0f launches/s  (%.2fx in-process)\n",
                "pipelined noop launches via Submit + 1 sync", f.launches_per_s,
                f.launches_per_s / in_process);
  }
  return 0;
}

}  // namespace
}  // namespace gpustream::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gpustream::bench::Run();
}
