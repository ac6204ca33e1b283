// gpustream_bench: measures, side by side in one process and on the same
// transports, the gRPC unary floor (an echo), a SynchronizeQueue round trip
// on an idle queue, pipelined noop launches through Submit, and the same
// launches straight into the CPU backend. Prints each figure and the ratios.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/echo.grpc.pb.h"
#include "client/gpustream.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/modules/module_registry.h"
#include "server/rpc/grpc_server.h"
#include "server/session/server_core.h"

ABSL_FLAG(int, round_trips, 5000, "Round trips per latency figure");
ABSL_FLAG(int, launches, 200000, "Launches per throughput figure");

namespace gpustream::bench {
namespace {

class EchoService : public Echo::CallbackService {
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* ctx,
                                 const EchoMessage* req,
                                 EchoMessage* resp) override {
    resp->set_value(req->value());
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

struct Latency {
  double median_us;
  double mean_us;
};

// Runs each of `ops` n times, interleaved in chunks so that drift in the
// machine's speed hits all alike; returns each one's median and mean in
// microseconds.
std::vector<Latency> MeasureInterleaved(
    int n, const std::vector<std::function<void()>>& ops) {
  constexpr int kChunk = 100;
  for (const auto& op : ops) {
    for (int i = 0; i < std::min(n / 10, 500); ++i) op();  // Warm-up.
  }
  std::vector<std::vector<double>> us(ops.size());
  for (int done = 0; done < n; done += kChunk) {
    for (size_t k = 0; k < ops.size(); ++k) {
      for (int i = 0; i < kChunk && done + i < n; ++i) {
        const absl::Time start = absl::Now();
        ops[k]();
        us[k].push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
      }
    }
  }
  std::vector<Latency> out;
  for (auto& v : us) {
    double sum = 0;
    for (double u : v) sum += u;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    out.push_back({v[v.size() / 2], sum / v.size()});
  }
  return out;
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "bench: %s failed\n", what);
    std::exit(1);
  }
}

// Launches/s of `n` noops straight into a CPU queue, then one wait.
double InProcessLaunchRate(int n) {
  backend::CpuDevice device({});
  auto registry = *modules::ModuleRegistry::Create(device, {});
  const backend::Kernel& noop = **registry->Find("samples", "noop");
  auto queue = *device.CreateQueue({});
  backend::LaunchConfig config;
  const absl::Time start = absl::Now();
  for (int i = 0; i < n; ++i) queue->Launch(noop, config, {});
  absl::Notification idle;
  queue->OnIdle([&](absl::Status) { idle.Notify(); });
  idle.WaitForNotification();
  return n / absl::ToDoubleSeconds(absl::Now() - start);
}

struct TransportFigures {
  Latency echo, sync_unary, sync_stream;
  double launches_per_s;
};

TransportFigures MeasureTransport(const std::string& target) {
  const int round_trips = absl::GetFlag(FLAGS_round_trips);
  const int launches = absl::GetFlag(FLAGS_launches);
  TransportFigures f;
  grpc::ChannelArguments args;
  auto channel = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args);

  auto echo = Echo::NewStub(channel);
  auto client = client::Client::Connect(channel);
  Check(client.ok(), "connect");
  auto session = client->open_session({.client_name = "bench"});
  Check(session.ok(), "open_session");
  client::Queue& queue = (*session)->default_queue();
  v1::SynchronizeQueueRequest sync;
  sync.set_session_id((*session)->id());
  sync.set_queue_id(queue.id());

  std::vector<Latency> latencies = MeasureInterleaved(
      round_trips,
      {[&] {
         grpc::ClientContext ctx;
         EchoMessage req, resp;
         req.set_value(1);
         Check(echo->Ping(&ctx, req, &resp).ok(), "echo");
       },
       // The raw unary RPC, exactly as any gRPC client sends it.
       [&] {
         grpc::ClientContext ctx;
         v1::SynchronizeQueueResponse resp;
         Check(client->stub().SynchronizeQueue(&ctx, sync, &resp).ok(), "sync");
       },
       // Through the client library: a command on the Submit stream.
       [&] { Check(queue.synchronize().ok(), "queue.synchronize"); }});
  f.echo = latencies[0];
  f.sync_unary = latencies[1];
  f.sync_stream = latencies[2];

  // Warm the stream, then time pipelined launches plus one synchronize.
  for (int i = 0; i < 1000; ++i) queue.launch("samples", "noop", {1}, {1}, {});
  Check(queue.synchronize().ok(), "warm-up");
  const absl::Time start = absl::Now();
  for (int i = 0; i < launches; ++i) {
    queue.launch("samples", "noop", {1}, {1}, {});
  }
  Check(queue.synchronize().ok(), "pipelined launches");
  f.launches_per_s = launches / absl::ToDoubleSeconds(absl::Now() - start);
  return f;
}

int Run() {
  std::vector<std::unique_ptr<backend::Device>> devices;
  devices.push_back(
      std::make_unique<backend::CpuDevice>(backend::CpuDeviceOptions{}));
  auto core = session::ServerCore::Create(std::move(devices), {}, {});
  Check(core.ok(), "core");
  EchoService echo;
  const std::string socket =
      absl::StrCat("/tmp/gpustream-bench-", getpid(), ".sock");
  auto server = rpc::GrpcServer::Start(
      **core, {"unix:" + socket, "127.0.0.1:0"}, 64 << 20, {&echo});
  Check(server.ok(), "server");

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
    TransportFigures f = MeasureTransport((*server)->addresses()[t]);
    std::printf("\n[%s]\n", names[t]);
    std::printf("%-48s %8.1f us median, %8.1f us mean\n",
                "gRPC unary echo (the floor)", f.echo.median_us,
                f.echo.mean_us);
    std::printf("%-48s %8.1f us median, %8.1f us mean  (%.2fx echo)\n",
                "SynchronizeQueue unary, idle queue", f.sync_unary.median_us,
                f.sync_unary.mean_us,
                f.sync_unary.median_us / f.echo.median_us);
    std::printf("%-48s %8.1f us median, %8.1f us mean  (%.2fx echo)\n",
                "queue.synchronize() on the Submit stream",
                f.sync_stream.median_us, f.sync_stream.mean_us,
                f.sync_stream.median_us / f.echo.median_us);
    std::printf("%-48s %12.0f launches/s  (%.2fx in-process)\n",
                "pipelined noop launches via Submit + 1 sync", f.launches_per_s,
                f.launches_per_s / in_process);
  }
  (*core)->sessions().CloseAll();
  (*server)->Shutdown(absl::Seconds(1));
  return 0;
}

}  // namespace
}  // namespace gpustream::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gpustream::bench::Run();
}
