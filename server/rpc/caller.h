// Who is calling: the request's bearer token, checked by the session layer.
#ifndef GPUSTREAM_SERVER_RPC_CALLER_H_
#define GPUSTREAM_SERVER_RPC_CALLER_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/statusor.h"
#include "server/session/server_core.h"

namespace gpustream::rpc {

inline absl::StatusOr<session::Principal> Caller(
    const session::ServerCore& core, grpc::CallbackServerContext* ctx) {
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return core.Authenticate(nullptr);
  const std::string value(it->second.data(), it->second.size());
  return core.Authenticate(&value);
}

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_CALLER_H_
