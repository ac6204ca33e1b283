// The HTTP endpoint of --metrics_listen: GET /metrics answers the Prometheus
// text format and HEAD /metrics its status and headers; every other path
// (/metrics/x and /metricsx included) is 404 Not Found. Served by
// prometheus-cpp's exposer (civetweb underneath) on a fixed pool of four
// threads, so scrapes never touch the gRPC threads.
#ifndef GPUSTREAM_SERVER_METRICS_METRICS_SERVER_H_
#define GPUSTREAM_SERVER_METRICS_METRICS_SERVER_H_

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gpustream::metrics {

class MetricsServer {
 public:
  // Listens on `listen` ("HOST:PORT", "[v6]:PORT"; port 0 picks one) and
  // serves `collectables`, which must outlive the server. INVALID_ARGUMENT
  // naming --metrics_listen when the address is malformed or cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen,
      const std::vector<std::shared_ptr<prometheus::Collectable>>&
          collectables);

  // "HOST:PORT" with the port resolved.
  const std::string& address() const { return address_; }

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer,
                std::string address)
      : exposer_(std::move(exposer)), address_(std::move(address)) {}

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
};

}  // namespace gpustream::metrics

#endif  // GPUSTREAM_SERVER_METRICS_METRICS_SERVER_H_
