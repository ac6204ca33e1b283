// Conversions between client types and wire types, shared by the library.
#ifndef GPUSTREAM_CLIENT_WIRE_H_
#define GPUSTREAM_CLIENT_WIRE_H_

#include <grpcpp/support/status.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/flag.h"
#include "proto/gpustream/v1/gpustream.pb.h"

namespace gpustream::client {

inline absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

inline v1::WaitCondition ToProto(WaitCondition c) {
  return c == WaitCondition::kGreaterEqual ? v1::WAIT_CONDITION_GREATER_EQUAL
                                           : v1::WAIT_CONDITION_EQUAL;
}

// A wire timeout_ms: 0 means none; positive durations round up to >= 1 ms.
inline uint32_t TimeoutMs(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return 0;
  return static_cast<uint32_t>(std::clamp<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))), 1,
      UINT32_MAX));
}

// How long the client waits for the answer to a call the daemon bounds by
// `timeout` (a zero timeout: without limit): the daemon's bound plus a
// grace for the round trip, so a frozen daemon or a silent network cannot
// hold the caller past it.
inline absl::Duration ClientWait(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return absl::InfiniteDuration();
  return timeout + absl::Seconds(2);
}

// How long the client waits for the answer to a call the daemon does not
// bound (a read, an allocation): `timeout`, or without limit if zero.
inline absl::Duration WaitLimit(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return absl::InfiniteDuration();
  return timeout;
}

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_WIRE_H_
