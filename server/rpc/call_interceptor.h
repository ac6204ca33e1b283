// Observes every gRPC call the daemon serves, as a server interceptor so no
// handler has to remember to: counts it by method and status code and
// times unary calls (metrics::Metrics, when metrics are on), and logs calls
// that fail (log::Event "rpc_failed": at error level for the codes that
// mean the daemon is at fault, INTERNAL, UNKNOWN and DATA_LOSS; at debug
// level for the rest, which are the caller's business).
#ifndef GPUSTREAM_SERVER_RPC_CALL_INTERCEPTOR_H_
#define GPUSTREAM_SERVER_RPC_CALL_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include "server/metrics/metrics.h"

namespace gpustream::rpc {

// One interceptor per call: created when the call arrives, destroyed when it
// is done; it records the status the server sent (CANCELLED when the call
// ended without one, e.g. the client went away). `metrics` may be null (no
// counting) and must otherwise outlive the server.
class CallInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CallInterceptorFactory(metrics::Metrics* metrics)
      : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  metrics::Metrics* const metrics_;
};

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_CALL_INTERCEPTOR_H_
