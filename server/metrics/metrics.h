// The daemon's Prometheus metrics: what gRPC calls and Submit streams did,
// counted as they happen. Tenant and device figures are read at scrape time
// (see stats_collector.h); both are served by MetricsServer.
//
// Names (the text format adds _bucket/_sum/_count to histograms):
//   gpustream_rpc_requests_total{service,method,code}     counter
//   gpustream_rpc_duration_seconds{service,method}        histogram (unary)
//   gpustream_submit_streams_total / _open                counter / gauge
//   gpustream_submit_requests_total                       counter
//   gpustream_submit_commands_total{code}                 counter (every
//                                                         command, by result)
//   gpustream_submit_result_bytes_pending                 gauge (read data
//                                                         admitted, not yet
//                                                         sent: each stream
//                                                         keeps its share
//                                                         within max_pending_
//                                                         result_bytes)
//   gpustream_notification_streams_open                   gauge
//   gpustream_build_info{version}                         gauge (1)
//
// Label values are bounded: `method` is one of the daemon's own methods
// ("unknown" otherwise, so a caller cannot mint series by inventing method
// names) and `code` one of the 17 gRPC codes.
//
// Thread safety: every method is safe from any thread; the per-call path
// takes no lock once a (method, code) series exists.
#ifndef GPUSTREAM_SERVER_METRICS_METRICS_H_
#define GPUSTREAM_SERVER_METRICS_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpustream::metrics {

// gRPC's status codes, 0..16.
inline constexpr int kCodes = 17;

class Metrics {
 public:
  // A method's series, each created on first use.
  struct Method {
    std::string service;
    std::string name;
    std::array<std::atomic<prometheus::Counter*>, kCodes> requests{};
    std::atomic<prometheus::Histogram*> duration{nullptr};
  };

  explicit Metrics(const std::string& version);
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // `full_method` as gRPC names it ("/gpustream.v1.GpuStream/OpenSession");
  // the "unknown" series for a method the daemon does not serve. Valid as
  // long as this object.
  Method* ForMethod(const char* full_method);
  // One finished call with gRPC status `code`; `elapsed` goes to the latency
  // histogram when `unary`.
  void RecordRpc(Method* method, int code, bool unary, absl::Duration elapsed);

  void SubmitStreamOpened();
  void SubmitStreamClosed();
  // One SubmitRequest read.
  void SubmitRequest();
  // A command's result (gRPC code) as sent back on its stream.
  void SubmitCommandDone(int code);
  // Read data a Submit stream admitted (`bytes` > 0) or sent or dropped
  // (< 0).
  void SubmitResultBytes(int64_t bytes);

  void NotificationStreamOpened();
  void NotificationStreamClosed();

  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }

 private:
  prometheus::Counter& Requests(Method& method, int code);
  prometheus::Histogram& Duration(Method& method);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& rpc_requests_;
  prometheus::Family<prometheus::Histogram>& rpc_duration_;
  prometheus::Counter& submit_streams_;
  prometheus::Gauge& submit_streams_open_;
  prometheus::Counter& submit_requests_;
  prometheus::Family<prometheus::Counter>& submit_commands_family_;
  std::array<prometheus::Counter*, kCodes> submit_commands_{};
  prometheus::Gauge& submit_result_bytes_pending_;
  prometheus::Gauge& notification_streams_open_;

  // Keyed by full method name; filled in the constructor, never changed
  // after, so lookups need no lock.
  absl::flat_hash_map<std::string, std::unique_ptr<Method>> methods_;
  Method unknown_;
  // Serializes series creation (prometheus-cpp's Family::Add is itself
  // thread-safe; this keeps one pointer per series).
  absl::Mutex create_mu_;
};

}  // namespace gpustream::metrics

#endif  // GPUSTREAM_SERVER_METRICS_METRICS_H_
