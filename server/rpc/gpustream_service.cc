// GpuStream service handlers.
#include "server/rpc/gpustream_service.h"

#include "server/rpc/caller.h"
#include "server/rpc/notification_reactor.h"
#include "server/rpc/status_util.h"
#include "server/rpc/submit_reactor.h"

namespace gpustream::rpc {
namespace {

grpc::ServerUnaryReactor* Finished(grpc::CallbackServerContext* ctx,
                                   const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

// Authenticates the caller into `who`, or finishes the call with the reason.
#define GPUSTREAM_AUTHENTICATE(who) \
  auto who = Caller(core_, ctx);    \
  if (!who.ok()) return Finished(ctx, who.status())

grpc::ServerUnaryReactor* GpuStreamService::GetVersion(
    grpc::CallbackServerContext* ctx, const v1::GetVersionRequest* req,
    v1::GetVersionResponse* resp) {
  GPUSTREAM_AUTHENTICATE(who);
  return Finished(ctx, core_.GetVersion(*req, resp));
}

grpc::ServerUnaryReactor* GpuStreamService::GetServerInfo(
    grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest* req,
    v1::GetServerInfoResponse* resp) {
  GPUSTREAM_AUTHENTICATE(who);
  return Finished(ctx, core_.GetServerInfo(*req, resp));
}

grpc::ServerUnaryReactor* GpuStreamService::ListDevices(
    grpc::CallbackServerContext* ctx, const v1::ListDevicesRequest* req,
    v1::ListDevicesResponse* resp) {
  GPUSTREAM_AUTHENTICATE(who);
  return Finished(ctx, core_.ListDevices(*req, resp));
}

grpc::ServerUnaryReactor* GpuStreamService::ListModules(
    grpc::CallbackServerContext* ctx, const v1::ListModulesRequest* req,
    v1::ListModulesResponse* resp) {
  GPUSTREAM_AUTHENTICATE(who);
  return Finished(ctx, core_.ListModules(*req, resp));
}

grpc::ServerUnaryReactor* GpuStreamService::OpenSession(
    grpc::CallbackServerContext* ctx, const v1::OpenSessionRequest* req,
    v1::OpenSessionResponse* resp) {
  GPUSTREAM_AUTHENTICATE(who);
  return Finished(ctx, core_.OpenSession(*who, *req, resp));
}

grpc::ServerUnaryReactor* GpuStreamService::CloseSession(
    grpc::CallbackServerContext* ctx, const v1::CloseSessionRequest* req,
    v1::CloseSessionResponse* resp) {
  GPUSTREAM_AUTHENTICATE(who);
  auto* reactor = ctx->DefaultReactor();
  core_.CloseSession(*who, *req, resp, [reactor](absl::Status s) {
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* GpuStreamService::KeepAlive(
    grpc::CallbackServerContext* ctx, const v1::KeepAliveRequest* req,
    v1::KeepAliveResponse* resp) {
  GPUSTREAM_AUTHENTICATE(who);
  return Finished(ctx, core_.KeepAlive(*who, *req, resp));
}

// Session operations: find the caller's session, run the operation, finish
// when it completes (at once for the non-waiting ones).
#define GPUSTREAM_DEFINE_UNARY(Name, field)                               \
  grpc::ServerUnaryReactor* GpuStreamService::Name(                       \
      grpc::CallbackServerContext* ctx, const v1::Name##Request* req,     \
      v1::Name##Response* resp) {                                         \
    GPUSTREAM_AUTHENTICATE(who);                                          \
    auto session = core_.FindSession(*who, req->session_id());            \
    if (!session.ok()) return Finished(ctx, session.status());            \
    auto* reactor = ctx->DefaultReactor();                                \
    session::Invoke(                                                      \
        **session, &session::Session::Name, *req, resp,                   \
        [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); }); \
    return reactor;                                                       \
  }
GPUSTREAM_SESSION_OPS(GPUSTREAM_DEFINE_UNARY)
#undef GPUSTREAM_DEFINE_UNARY
#undef GPUSTREAM_AUTHENTICATE

grpc::ServerWriteReactor<v1::Notification>*
GpuStreamService::WatchNotifications(grpc::CallbackServerContext* ctx,
                                     const v1::WatchNotificationsRequest* req) {
  auto who = Caller(core_, ctx);
  auto session =
      who.ok() ? core_.FindSession(*who, req->session_id()) : who.status();
  if (!session.ok()) {
    // A reactor that only reports the error.
    class Failed : public grpc::ServerWriteReactor<v1::Notification> {
     public:
      explicit Failed(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
      void OnDone() override { delete this; }
    };
    return new Failed(session.status());
  }
  return new NotificationReactor(*std::move(session), submit_.metrics);
}

grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse>*
GpuStreamService::Submit(grpc::CallbackServerContext* ctx) {
  return new SubmitReactor(core_, Caller(core_, ctx), submit_);
}

}  // namespace gpustream::rpc
