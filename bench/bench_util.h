// What the benchmarks share: an in-process gpustreamd with a bare gRPC echo
// beside it (the floor of a round trip), interleaved latency measurement,
// the synchronize round trips against that floor, and the pipelined launch
// rate through the Submit stream.
#ifndef GPUSTREAM_BENCH_BENCH_UTIL_H_
#define GPUSTREAM_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/echo.grpc.pb.h"
#include "client/gpustream.h"
#include "server/backend/device.h"
#include "server/metrics/metrics.h"
#include "server/rpc/grpc_server.h"
#include "server/session/server_core.h"

namespace gpustream::bench {

// Exits with a message naming the step when it failed: a benchmark cannot
// recover, and a figure measured after a failure would mislead.
void Check(bool ok, const char* what);
void Check(const absl::Status& status, const char* what);

struct Latency {
  double median_us;
  double mean_us;
  std::vector<double> samples_us;  // Every round trip, in order.
};

// Figures for tools/plot_bench.py: `json` (an object) written to
// DIR/NAME.json when `dir` is not empty; exits naming the file if it
// cannot. JsonArray: "[v1, v2, ...]".
void WriteFigures(const std::string& dir, const std::string& name,
                  const std::string& json);
std::string JsonArray(const std::vector<double>& values);

// Runs each of `ops` n times, interleaved in chunks so that drift in the
// machine's speed hits all alike; returns each one's median and mean in
// microseconds.
std::vector<Latency> MeasureInterleaved(
    int n, const std::vector<std::function<void()>>& ops);

// The median of `values` (which it reorders); 0 for none.
double Median(std::vector<double>& values);

class EchoService : public Echo::CallbackService {
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* ctx,
                                 const EchoMessage* req,
                                 EchoMessage* resp) override;
  grpc::ServerBidiReactor<EchoMessage, EchoMessage>* PingStream(
      grpc::CallbackServerContext* ctx) override;
};

// gpustreamd inside this process, so that client and server share the
// machine exactly as they would across processes on it: a ServerCore over
// the given devices, served on a unix socket (in /tmp, named after `name`
// and the pid) and on 127.0.0.1 with a free port, with the echo service
// beside GpuStream. Exits the process if it cannot start.
class InProcessDaemon {
 public:
  // `metrics` (may be null) counts every call, as --metrics_listen does.
  // `options` and `tenants` (null: none) as ServerCore::Create takes them.
  InProcessDaemon(std::vector<std::unique_ptr<backend::Device>> devices,
                  const std::string& name, metrics::Metrics* metrics = nullptr,
                  session::ManagerOptions options = {},
                  std::unique_ptr<tenants::TenantRegistry> tenants = nullptr);
  // Closes every session, then stops the transport.
  ~InProcessDaemon();

  // {"unix:/tmp/...sock", "127.0.0.1:<port>"}.
  const std::vector<std::string>& addresses() const {
    return server_->addresses();
  }
  const std::string& unix_address() const { return addresses()[0]; }

 private:
  EchoService echo_;  // Outlives the server, which serves it.
  std::unique_ptr<session::ServerCore> core_;
  std::unique_ptr<rpc::GrpcServer> server_;
};

// A client connected to `target` with one open session.
struct BenchClient {
  std::unique_ptr<Echo::Stub> echo;
  std::unique_ptr<client::Client> client;
  std::unique_ptr<client::Session> session;
};
BenchClient ConnectBenchClient(const std::string& target);

struct SyncFigures {
  Latency echo;         // The bare gRPC unary echo: the floor.
  Latency sync_unary;   // SynchronizeQueue as a raw unary RPC.
  Latency sync_stream;  // queue.synchronize() on the Submit stream.
  // A ping-pong on an open bidirectional stream, messages as large as a
  // synchronize's on Submit: the floor of sync_stream.
  Latency bidi;
};
// The four round trips on the idle `queue` of `c`, `n` times each,
// interleaved.
SyncFigures MeasureSyncRoundTrips(BenchClient& c, client::Queue& queue, int n);

// Prints the three, one line each with each synchronize's ratio to the
// echo, labels padded to `width` columns.
void PrintSyncFigures(const SyncFigures& s, int width);

// Calls `op` (returning absl::Status) `n` times, or fewer once `deadline`
// has passed. The clock is read once per 1,024 calls: it costs about as
// much as a launch. Returns the calls made, or the first error.
template <typename Op>
absl::StatusOr<int> RepeatUntil(int n, absl::Time deadline, Op op) {
  int done = 0;
  while (done < n) {
    const int batch = std::min(n - done, 1024);
    for (int i = 0; i < batch; ++i) {
      if (absl::Status s = op(); !s.ok()) return s;
    }
    done += batch;
    if (absl::Now() >= deadline) break;
  }
  return done;
}

// Launches/s of `n` pipelined `samples.noop` launches on `queue` followed by
// one synchronize, after a warm-up. Stops launching early (the rate counts
// what was launched) once `budget` has passed, so that a slow backend
// cannot hold the run for long.
// Effective noop launches/s of a captured graph of `graph_size` noop
// launches, launched pipelined through Submit about n / graph_size times
// (or for `budget`), then one synchronize.
double GraphNoopLaunchRate(client::Queue& queue, int n, int graph_size,
                           absl::Duration budget = absl::Seconds(20));
double SubmitNoopLaunchRate(client::Queue& queue, int n,
                            absl::Duration budget = absl::InfiniteDuration());

}  // namespace gpustream::bench

#endif  // GPUSTREAM_BENCH_BENCH_UTIL_H_
