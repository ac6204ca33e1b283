// The GpuStream gRPC service: decodes requests, calls the session layer,
// encodes results. Knows nothing of backends.
#ifndef GPUSTREAM_SERVER_RPC_GPUSTREAM_SERVICE_H_
#define GPUSTREAM_SERVER_RPC_GPUSTREAM_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/rpc/submit_reactor.h"
#include "server/session/ops.h"
#include "server/session/server_core.h"

namespace gpustream::rpc {

// Every handler returns without waiting for device work: waiting RPCs
// finish their reactor from the backend thread that completes them.
class GpuStreamService : public v1::GpuStream::CallbackService {
 public:
  explicit GpuStreamService(session::ServerCore& core,
                            SubmitStreamOptions submit = {})
      : core_(core), submit_(submit) {}

  grpc::ServerUnaryReactor* GetVersion(grpc::CallbackServerContext* ctx,
                                       const v1::GetVersionRequest* req,
                                       v1::GetVersionResponse* resp) override;
  grpc::ServerUnaryReactor* GetServerInfo(
      grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest* req,
      v1::GetServerInfoResponse* resp) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* ctx,
                                        const v1::ListDevicesRequest* req,
                                        v1::ListDevicesResponse* resp) override;
  grpc::ServerUnaryReactor* ListModules(grpc::CallbackServerContext* ctx,
                                        const v1::ListModulesRequest* req,
                                        v1::ListModulesResponse* resp) override;
  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* ctx,
                                        const v1::OpenSessionRequest* req,
                                        v1::OpenSessionResponse* resp) override;
  grpc::ServerUnaryReactor* CloseSession(
      grpc::CallbackServerContext* ctx, const v1::CloseSessionRequest* req,
      v1::CloseSessionResponse* resp) override;
  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* ctx,
                                      const v1::KeepAliveRequest* req,
                                      v1::KeepAliveResponse* resp) override;

#define GPUSTREAM_DECLARE_UNARY(Name, field)                       \
  grpc::ServerUnaryReactor* Name(grpc::CallbackServerContext* ctx, \
                                 const v1::Name##Request* req,     \
                                 v1::Name##Response* resp) override;
  GPUSTREAM_SESSION_OPS(GPUSTREAM_DECLARE_UNARY)
#undef GPUSTREAM_DECLARE_UNARY

  grpc::ServerWriteReactor<v1::Notification>* WatchNotifications(
      grpc::CallbackServerContext* ctx,
      const v1::WatchNotificationsRequest* req) override;

  grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse>* Submit(
      grpc::CallbackServerContext* ctx) override;

 private:
  session::ServerCore& core_;
  const SubmitStreamOptions submit_;  // Bounds of each Submit stream.
};

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_GPUSTREAM_SERVICE_H_
