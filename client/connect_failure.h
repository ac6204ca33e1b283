// What a failed connection attempt means, in words a user can act on.
#ifndef GPUSTREAM_CLIENT_CONNECT_FAILURE_H_
#define GPUSTREAM_CLIENT_CONNECT_FAILURE_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace gpustream::client {

// The daemon's default address, as gpustreamd, gpustreamctl and the Python
// client have it.
inline constexpr char kDefaultTarget[] = "unix:/tmp/gpustreamd.sock";

// `target` itself when not empty, else $GPUSTREAM_TARGET when set, else
// kDefaultTarget.
std::string ResolveTarget(const std::string& target);
// `token` itself when not empty, else $GPUSTREAM_TOKEN (maybe empty).
std::string ResolveToken(const std::string& token);

// The status of a connection handshake that failed with `status`, as
// "connect to TARGET: CAUSE" with the cause named where gRPC's message
// shows it: no such socket, nobody listening, permission denied, a TLS
// handshake that failed (the server wants TLS, or does not speak it, or its
// certificate did not verify). A handshake that got no answer within
// `timeout` is UNAVAILABLE too. Other failures (UNAUTHENTICATED, a version
// mismatch) keep their code. `tls`: whether the client used TLS.
absl::Status ExplainConnectFailure(const std::string& target, bool tls,
                                   absl::Duration timeout,
                                   const grpc::Status& status);

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_CONNECT_FAILURE_H_
