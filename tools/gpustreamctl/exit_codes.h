// The exit codes of gpustreamctl, a contract for scripts (documented in
// docs/gpustreamctl.md; never renumber).
#ifndef GPUSTREAM_TOOLS_GPUSTREAMCTL_EXIT_CODES_H_
#define GPUSTREAM_TOOLS_GPUSTREAMCTL_EXIT_CODES_H_

#include "absl/status/status.h"

namespace gpustream::ctl {

enum ExitCode : int {
  kExitOk = 0,
  kExitDaemonError = 1,   // The daemon answered the request with an error.
  kExitUsage = 2,         // Command line, options or local files.
  kExitUnreachable = 3,   // UNAVAILABLE or DEADLINE_EXCEEDED.
  kExitUnauthorized = 4,  // UNAUTHENTICATED or PERMISSION_DENIED.
  kExitNotServing = 5,    // health: the daemon answered NOT_SERVING.
};

// The exit code of a call that ended with `status` (a daemon call's status,
// converted from gRPC's code one to one).
inline ExitCode ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitUnauthorized;
    default:
      return kExitDaemonError;
  }
}

}  // namespace gpustream::ctl

#endif  // GPUSTREAM_TOOLS_GPUSTREAMCTL_EXIT_CODES_H_
