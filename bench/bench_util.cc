// What the benchmarks share (bench_util.h).
#include "bench/bench_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gpustream::bench {
namespace {

// The longest one synchronize after a batch of launches may take: far above
// any real figure, it only stops a wedged backend from hanging the run.
constexpr absl::Duration kDrainTimeout = absl::Minutes(2);

}  // namespace

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "bench: %s failed\n", what);
    std::exit(1);
  }
}

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "bench: %s failed: %s\n", what,
                 status.ToString().c_str());
    std::exit(1);
  }
}

double Median(std::vector<double>& values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2,
                   values.end());
  return values[values.size() / 2];
}

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
    const double mean = v.empty() ? 0 : sum / v.size();
    out.push_back({Median(v), mean});
  }
  return out;
}

grpc::ServerUnaryReactor* EchoService::Ping(grpc::CallbackServerContext* ctx,
                                            const EchoMessage* req,
                                            EchoMessage* resp) {
  resp->set_value(req->value());
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

InProcessDaemon::InProcessDaemon(
    std::vector<std::unique_ptr<backend::Device>> devices,
    const std::string& name, metrics::Metrics* metrics,
    session::ManagerOptions options,
    std::unique_ptr<tenants::TenantRegistry> tenants) {
  auto core = session::ServerCore::Create(std::move(devices), {}, options,
                                          std::move(tenants));
  Check(core.status(), "ServerCore::Create");
  core_ = *std::move(core);
  const std::string socket =
      absl::StrCat("/tmp/", name, "-", getpid(), ".sock");
  rpc::ServerOptions server_options;
  server_options.listen = {"unix:" + socket, "127.0.0.1:0"};
  server_options.max_message_bytes = 64 << 20;
  server_options.extra_services = {&echo_};
  server_options.metrics = metrics;
  server_options.share_socket = rpc::DefaultShareSocket(server_options.listen);
  auto server = rpc::GrpcServer::Start(*core_, server_options);
  Check(server.status(), "GrpcServer::Start");
  server_ = *std::move(server);
}

InProcessDaemon::~InProcessDaemon() {
  core_->sessions().CloseAll();
  server_->Shutdown(absl::Seconds(1));
}

BenchClient ConnectBenchClient(const std::string& target) {
  BenchClient c;
  grpc::ChannelArguments args;
  auto channel = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args);
  c.echo = Echo::NewStub(channel);
  auto client = client::Client::Connect(channel);
  Check(client.status(), "connect");
  c.client = std::make_unique<client::Client>(*std::move(client));
  auto session = c.client->open_session({.client_name = "bench"});
  Check(session.status(), "open_session");
  c.session = *std::move(session);
  return c;
}

SyncFigures MeasureSyncRoundTrips(BenchClient& c, client::Queue& queue, int n) {
  v1::SynchronizeQueueRequest sync;
  sync.set_session_id(c.session->id());
  sync.set_queue_id(queue.id());
  std::vector<Latency> latencies = MeasureInterleaved(
      n, {[&] {
            grpc::ClientContext ctx;
            EchoMessage req, resp;
            req.set_value(1);
            Check(c.echo->Ping(&ctx, req, &resp).ok(), "echo");
          },
          // The raw unary RPC, exactly as any gRPC client sends it.
          [&] {
            grpc::ClientContext ctx;
            v1::SynchronizeQueueResponse resp;
            Check(c.client->stub().SynchronizeQueue(&ctx, sync, &resp).ok(),
                  "SynchronizeQueue");
          },
          // Through the client library: a command on the Submit stream.
          [&] { Check(queue.synchronize(), "queue.synchronize"); }});
  return {latencies[0], latencies[1], latencies[2]};
}

void PrintSyncFigures(const SyncFigures& s, int width) {
  std::printf("%-*s %8.1f us median, %8.1f us mean\n", width,
              "gRPC unary echo (the floor)", s.echo.median_us, s.echo.mean_us);
  const std::pair<const char*, const Latency*> syncs[] = {
      {"SynchronizeQueue unary, idle queue", &s.sync_unary},
      {"queue.synchronize() on the Submit stream", &s.sync_stream}};
  for (const auto& [label, l] : syncs) {
    std::printf("%-*s %8.1f us median, %8.1f us mean  (%.2fx echo)\n", width,
                label, l->median_us, l->mean_us,
                l->median_us / s.echo.median_us);
  }
}

double SubmitNoopLaunchRate(client::Queue& queue, int n,
                            absl::Duration budget) {
  // Warm the stream (and the backend's first launch) outside the timing.
  for (int i = 0; i < 1000; ++i) queue.launch("samples", "noop", {1}, {1}, {});
  Check(queue.synchronize(kDrainTimeout), "warm-up launches");
  const absl::Time start = absl::Now();
  absl::StatusOr<int> launched = RepeatUntil(n, start + budget, [&] {
    queue.launch("samples", "noop", {1}, {1}, {});
    return absl::OkStatus();  // Failures come back at the synchronize.
  });
  Check(queue.synchronize(kDrainTimeout), "pipelined launches");
  return *launched / absl::ToDoubleSeconds(absl::Now() - start);
}

double GraphNoopLaunchRate(client::Queue& queue, int n, int graph_size,
                           absl::Duration budget) {
  absl::StatusOr<client::Graph> graph = queue.capture([&] {
    for (int i = 0; i < graph_size; ++i) {
      queue.launch("samples", "noop", {1}, {1}, {});
    }
  });
  Check(graph.status(), "capturing the graph");
  for (int i = 0; i < 100; ++i) queue.launch(*graph);
  Check(queue.synchronize(kDrainTimeout), "warm-up graph launches");
  const absl::Time start = absl::Now();
  absl::StatusOr<int> launched =
      RepeatUntil(std::max(1, n / graph_size), start + budget, [&] {
        queue.launch(*graph);
        return absl::OkStatus();  // Failures come back at the synchronize.
      });
  Check(queue.synchronize(kDrainTimeout), "pipelined graph launches");
  return double{1} * *launched * graph_size /
         absl::ToDoubleSeconds(absl::Now() - start);
}

}  // namespace gpustream::bench
