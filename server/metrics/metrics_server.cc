#include "server/metrics/metrics_server.h"

#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpustream::metrics {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  const size_t colon = listen.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen=", listen,
                     ": expected HOST:PORT, e.g. 0.0.0.0:9400"));
  }
  const std::string host = listen.substr(0, colon);
  // One address: civetweb would read a comma as a list, and anything but a
  // host name, an IPv4 address or a bracketed IPv6 one as options.
  const bool bracketed =
      host.size() > 2 && host.front() == '[' && host.back() == ']' &&
      host.find_first_not_of("0123456789abcdefABCDEF:.", 1) == host.size() - 1;
  const bool plain =
      host.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") ==
      std::string::npos;
  if (!bracketed && !plain) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_listen=", listen,
        ": expected one HOST:PORT (a host name, an IPv4 address or [IPv6])"));
  }
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", listen,
        // Bounded: four threads, and a connection that sends no request
        // within 3 s is dropped, so a few silent sockets cannot hold every
        // scrape past Prometheus's 10 s scrape timeout.
        "num_threads", "4", "request_timeout_ms", "3000"});
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_listen=", listen, ": cannot listen: ", e.what()));
  }
  for (const auto& collectable : collectables) {
    exposer->RegisterCollectable(collectable);
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  const std::string address = absl::StrCat(
      host, ":", ports.empty() ? static_cast<int>(port) : ports[0]);
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(std::move(exposer), address));
}

}  // namespace gpustream::metrics
