// The Admin gRPC service (ListSessions, KillSession, GetStats): admin
// tenants only, checked by the session layer.
#ifndef GPUSTREAM_SERVER_RPC_ADMIN_SERVICE_H_
#define GPUSTREAM_SERVER_RPC_ADMIN_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/session/server_core.h"

namespace gpustream::rpc {

class AdminService : public v1::Admin::CallbackService {
 public:
  explicit AdminService(session::ServerCore& core) : core_(core) {}

  grpc::ServerUnaryReactor* ListSessions(
      grpc::CallbackServerContext* ctx, const v1::ListSessionsRequest* req,
      v1::ListSessionsResponse* resp) override;
  grpc::ServerUnaryReactor* KillSession(grpc::CallbackServerContext* ctx,
                                        const v1::KillSessionRequest* req,
                                        v1::KillSessionResponse* resp) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx,
                                     const v1::GetStatsRequest* req,
                                     v1::GetStatsResponse* resp) override;

 private:
  session::ServerCore& core_;
};

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_ADMIN_SERVICE_H_
