// Admin service handlers: authenticate, then the session layer decides.
#include "server/rpc/admin_service.h"

#include "server/rpc/caller.h"
#include "server/rpc/status_util.h"

namespace gpustream::rpc {
namespace {

// Runs `op` for the authenticated caller and finishes the call.
template <typename Op>
grpc::ServerUnaryReactor* Run(session::ServerCore& core,
                              grpc::CallbackServerContext* ctx, Op op) {
  auto who = Caller(core, ctx);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(who.ok() ? op(*who) : who.status()));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::ListSessions(
    grpc::CallbackServerContext* ctx, const v1::ListSessionsRequest* req,
    v1::ListSessionsResponse* resp) {
  return Run(core_, ctx, [&](const tenants::Principal& who) {
    return core_.ListSessions(who, *req, resp);
  });
}

grpc::ServerUnaryReactor* AdminService::KillSession(
    grpc::CallbackServerContext* ctx, const v1::KillSessionRequest* req,
    v1::KillSessionResponse* resp) {
  return Run(core_, ctx, [&](const tenants::Principal& who) {
    return core_.KillSession(who, *req, resp);
  });
}

grpc::ServerUnaryReactor* AdminService::GetStats(
    grpc::CallbackServerContext* ctx, const v1::GetStatsRequest* req,
    v1::GetStatsResponse* resp) {
  return Run(core_, ctx, [&](const tenants::Principal& who) {
    return core_.GetStats(who, *req, resp);
  });
}

}  // namespace gpustream::rpc
