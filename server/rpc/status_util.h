// absl::Status to gRPC and wire statuses: the only place codes are converted.
#ifndef GPUSTREAM_SERVER_RPC_STATUS_UTIL_H_
#define GPUSTREAM_SERVER_RPC_STATUS_UTIL_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "proto/gpustream/v1/gpustream.pb.h"

namespace gpustream::rpc {

// gRPC 1.51 has no absl::Status constructor; the numeric codes are the same.
inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline void ToProto(const absl::Status& status, v1::Status* out) {
  out->set_code(static_cast<int>(status.code()));
  out->set_message(std::string(status.message()));
}

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_STATUS_UTIL_H_
