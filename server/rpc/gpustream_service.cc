// GpuStream service handlers.
#include "server/rpc/gpustream_service.h"

#include "absl/strings/str_cat.h"
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

// A waiting unary call (a synchronize, a wait, a read, a queue's
// destruction): tells its operation when gRPC says the client went away
// (cancelled, disconnected or past its deadline), so the wait's host-wait
// slot, watch and response go at once, not when the awaited thing happens.
class WaitingCall : public grpc::ServerUnaryReactor {
 public:
  WaitingCall() = default;
  // A read: `bytes` of `session`'s pending_results(), given back once gRPC
  // is done with the response.
  WaitingCall(std::shared_ptr<session::Session> session, uint64_t bytes)
      : session_(std::move(session)), bytes_(bytes) {}

  const session::Session::Cancel& cancel() const { return cancel_; }

  void OnCancel() override { cancel_->Cancel(); }
  void OnDone() override {
    if (session_ != nullptr) session_->pending_results().Give(bytes_);
    delete this;
  }

 private:
  const session::Session::Cancel cancel_ =
      std::make_shared<session::CallCancel>();
  const std::shared_ptr<session::Session> session_;
  const uint64_t bytes_ = 0;
};

// Runs a session operation that answers at once.
template <typename Req, typename Resp>
grpc::ServerUnaryReactor* RunOp(
    grpc::CallbackServerContext* ctx, const SubmitStreamOptions&,
    const std::shared_ptr<session::Session>& session,
    absl::Status (session::Session::*op)(const Req&, Resp*), const Req& req,
    Resp* resp) {
  return Finished(ctx, ((*session).*op)(req, resp));
}

// Runs a waiting session operation on `call`: it finishes the call when it
// completes.
template <typename Req, typename Resp>
grpc::ServerUnaryReactor* RunWaiting(
    WaitingCall* call, session::Session& session,
    void (session::Session::*op)(const Req&, Resp*, session::Session::Done,
                                 const session::Session::Cancel&),
    const Req& req, Resp* resp) {
  (session.*op)(
      req, resp, [call](absl::Status s) { call->Finish(ToGrpcStatus(s)); },
      call->cancel());
  return call;
}

template <typename Req, typename Resp>
grpc::ServerUnaryReactor* RunOp(
    grpc::CallbackServerContext*, const SubmitStreamOptions&,
    const std::shared_ptr<session::Session>& session,
    void (session::Session::*op)(const Req&, Resp*, session::Session::Done,
                                 const session::Session::Cancel&),
    const Req& req, Resp* resp) {
  return RunWaiting(new WaitingCall, *session, op, req, resp);
}

// A unary read counts against the session's max_pending_result_bytes, as
// its streams' reads do, until gRPC is done with the response.
grpc::ServerUnaryReactor* RunOp(
    grpc::CallbackServerContext* ctx, const SubmitStreamOptions& limits,
    const std::shared_ptr<session::Session>& session,
    decltype(&session::Session::ReadBuffer) op,
    const v1::ReadBufferRequest& req, v1::ReadBufferResponse* resp) {
  if (!session->pending_results().TryTake(req.size(),
                                          limits.max_pending_result_bytes)) {
    return Finished(
        ctx,
        absl::ResourceExhaustedError(absl::StrCat(
            "a read of ", req.size(),
            " bytes would exceed max_pending_result_bytes (",
            limits.max_pending_result_bytes, ") of session ",
            session->owner().public_id, ": ", session->pending_results().used(),
            " bytes of earlier reads (on its streams and ReadBuffer "
            "calls) are not yet sent; collect those results first, or "
            "read in smaller pieces")));
  }
  return RunWaiting(new WaitingCall(session, req.size()), *session, op, req,
                    resp);
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
#define GPUSTREAM_DEFINE_UNARY(Name, field)                                    \
  grpc::ServerUnaryReactor* GpuStreamService::Name(                            \
      grpc::CallbackServerContext* ctx, const v1::Name##Request* req,          \
      v1::Name##Response* resp) {                                              \
    GPUSTREAM_AUTHENTICATE(who);                                               \
    auto session = core_.FindSession(*who, req->session_id());                 \
    if (!session.ok()) return Finished(ctx, session.status());                 \
    return RunOp(ctx, submit_, *session, &session::Session::Name, *req, resp); \
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
  std::optional<uint64_t> acknowledged_id;
  if (req->has_acknowledged_id()) acknowledged_id = req->acknowledged_id();
  return new NotificationReactor(*std::move(session), acknowledged_id,
                                 submit_.metrics);
}

grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse>*
GpuStreamService::Submit(grpc::CallbackServerContext* ctx) {
  return new SubmitReactor(core_, Caller(core_, ctx), submit_);
}

}  // namespace gpustream::rpc
