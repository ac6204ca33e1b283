// Claiming a --listen address without taking it from another process.
#ifndef GPUSTREAM_SERVER_RPC_LISTEN_ADDRESS_H_
#define GPUSTREAM_SERVER_RPC_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/status.h"

namespace gpustream::rpc {

// Checks that `address` ("unix:PATH" or "HOST:PORT") is free before gRPC
// binds it, so that a second daemon never silently takes over a first:
//  - a unix socket that answers a connect belongs to a live process: refused
//    ("address in use", naming it); one nobody answers on was left by a
//    process that died, and is removed so that gRPC can bind the path;
//    anything else at the path (a file, a socket that cannot be probed) is
//    refused and left alone;
//  - a TCP address another socket listens on is refused (gRPC binds
//    without SO_REUSEPORT, GrpcServer::Start). Port 0 is always free.
// FAILED_PRECONDITION when refused. Not atomic: a process binding between
// this check and gRPC's bind still makes the start fail, less clearly.
absl::Status ClaimListenAddress(const std::string& address);

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_LISTEN_ADDRESS_H_
