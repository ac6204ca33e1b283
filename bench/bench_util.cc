// What the benchmarks share (bench_util.h).
#include "bench/bench_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/log/log.h"

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
    std::vector<double> samples = v;
    out.push_back({Median(v), mean, std::move(samples)});
  }
  return out;
}

void WriteFigures(const std::string& dir, const std::string& name,
                  const std::string& json) {
  if (dir.empty()) return;
  const std::string path = absl::StrCat(dir, "/", name, ".json");
  std::FILE* f = std::fopen(path.c_str(), "w");
  Check(f != nullptr && std::fputs(json.c_str(), f) >= 0 && std::fclose(f) == 0,
        path.c_str());
}

std::string JsonArray(const std::vector<double>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ",",
                    absl::StrFormat("%.3f", values[i]));
  }
  return out + "]";
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
  // The daemon's log lines go to a file: printed among the figures they
  // would cost terminal time and bury the results.
  // Once per process: a bench that starts several daemons (sharing_bench)
  // must not swap the logger under threads that log.
  static const std::string log_file = [&] {
    std::string file = absl::StrCat("/tmp/", name, "-", getpid(), ".log");
    log::Init(log::Level::kInfo, log::Format::kText, file);
    return file;
  }();
  std::printf("(daemon log: %s)\n", log_file.c_str());
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

grpc::ServerBidiReactor<EchoMessage, EchoMessage>* EchoService::PingStream(
    grpc::CallbackServerContext*) {
  // Reads a message, writes it back, reads the next: one in flight.
  class Reactor : public grpc::ServerBidiReactor<EchoMessage, EchoMessage> {
   public:
    Reactor() { StartRead(&message_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      StartWrite(&message_);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::CANCELLED);
        return;
      }
      StartRead(&message_);
    }
    void OnDone() override { delete this; }

   private:
    EchoMessage message_;
  };
  return new Reactor;
}

SyncFigures MeasureSyncRoundTrips(BenchClient& c, client::Queue& queue, int n) {
  v1::SynchronizeQueueRequest sync;
  sync.set_session_id(c.session->id());
  sync.set_queue_id(queue.id());
  // The bidi floor's message: as large as a synchronize on Submit (the
  // session id, a seq and the command), both ways.
  v1::SubmitRequest submit;
  submit.set_session_id(c.session->id());
  v1::Command* command = submit.add_commands();
  command->set_seq(1000000);
  command->mutable_synchronize_queue()->set_queue_id(queue.id());
  EchoMessage ping;
  ping.set_payload(std::string(submit.ByteSizeLong(), 'p'));
  grpc::ClientContext stream_ctx;
  auto stream = c.echo->PingStream(&stream_ctx);
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
          [&] { Check(queue.synchronize(), "queue.synchronize"); },
          [&] {
            EchoMessage pong;
            Check(stream->Write(ping) && stream->Read(&pong), "stream echo");
          }});
  stream->WritesDone();
  Check(stream->Finish().ok(), "closing the stream echo");
  return {latencies[0], latencies[1], latencies[2], latencies[3]};
}

void PrintSyncFigures(const SyncFigures& s, int width) {
  std::printf("%-*s %8.1f us median, %8.1f us mean\n", width,
              "gRPC unary echo (the floor)", s.echo.median_us, s.echo.mean_us);
  std::printf("%-*s %8.1f us median, %8.1f us mean\n", width,
              "bidi stream ping-pong (the stream floor)", s.bidi.median_us,
              s.bidi.mean_us);
  std::printf(
      "%-*s %8.1f us median, %8.1f us mean  (%.2fx echo; goal <= 1.05x)\n",
      width, "SynchronizeQueue unary, idle queue", s.sync_unary.median_us,
      s.sync_unary.mean_us, s.sync_unary.median_us / s.echo.median_us);
  std::printf(
      "%-*s %8.1f us median, %8.1f us mean  (%.2fx bidi ping-pong; goal <= "
      "1.1x; %.2fx echo)\n",
      width, "queue.synchronize() on the Submit stream",
      s.sync_stream.median_us, s.sync_stream.mean_us,
      s.sync_stream.median_us / s.bidi.median_us,
      s.sync_stream.median_us / s.echo.median_us);
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
