#include "server/metrics/metrics_server.h"

#include <CivetServer.h>
#include <civetweb.h>

#include <cstring>
#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpustream::metrics {
namespace {

// civetweb's begin_request: runs before its handlers, which match "/metrics"
// as a prefix and answer GET only. Returns 1 when it answered the request
// itself, 0 to let the exposer's handler serve it (GET /metrics).
int ExactMetricsPath(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  const char* path = info->local_uri != nullptr ? info->local_uri : "";
  if (std::strcmp(path, "/metrics") != 0) {
    mg_send_http_error(conn, 404, "%s",
                       "Not Found: the metrics are at /metrics\n");
    return 1;
  }
  if (std::strcmp(info->request_method, "HEAD") == 0) {
    // What GET answers (prometheus-cpp's status and type), without the
    // body, whose length is not known until it is serialized: none is
    // announced, which HTTP allows.
    mg_printf(conn,
              "HTTP/1.1 200 OK\r\n"
              "Content-Type: text/plain; charset=utf-8\r\n"
              "Connection: close\r\n\r\n");
    return 1;
  }
  return 0;
}

}  // namespace

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
  // Copied by the server when it starts; the rest stay unset.
  CivetCallbacks callbacks;
  callbacks.begin_request = &ExactMetricsPath;
  try {
    exposer = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{
            "listening_ports", listen,
            // Bounded: four threads, and a connection that sends no request
            // within 3 s is dropped, so a few silent sockets cannot hold
            // every scrape past Prometheus's 10 s scrape timeout.
            "num_threads", "4", "request_timeout_ms", "3000"},
        &callbacks);
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
