// Builds and starts the gRPC server: GpuStream, health and reflection.
#ifndef GPUSTREAM_SERVER_RPC_GRPC_SERVER_H_
#define GPUSTREAM_SERVER_RPC_GRPC_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/rpc/gpustream_service.h"
#include "server/session/server_core.h"

namespace gpustream::rpc {

class GrpcServer {
 public:
  // Listens on each of `listen` ("unix:/path" or "host:port"; port 0 picks
  // one). A stale unix socket file is replaced. INVALID_ARGUMENT naming the
  // address that could not be bound.
  // `extra_services` (not owned, must outlive the server) are served beside
  // GpuStream.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      session::ServerCore& core, const std::vector<std::string>& listen,
      int max_message_bytes,
      const std::vector<grpc::Service*>& extra_services = {});

  // The bound addresses, ports resolved ("127.0.0.1:41231").
  const std::vector<std::string>& addresses() const { return addresses_; }
  grpc::Server& server() { return *server_; }
  // An in-process channel, for tests and benchmarks.
  std::shared_ptr<grpc::Channel> InProcessChannel();

  // Refuses new calls, cancels the rest after `grace`, waits for handlers.
  void Shutdown(absl::Duration grace);

 private:
  GrpcServer(session::ServerCore& core) : service_(core) {}

  GpuStreamService service_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::string> addresses_;
};

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_GRPC_SERVER_H_
