// Connection failures explained, and the target and token from the
// environment.
#include "client/connect_failure.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpustream::client {
namespace {

std::string FromEnv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// The cause in gRPC's words ("failed to connect to all addresses; last
// error: UNKNOWN: unix:/x.sock: No such file or directory"), as advice.
// Empty when the message shows nothing known.
std::string Cause(const std::string& target, bool tls,
                  const std::string& detail) {
  // OpenSSL and BoringSSL word the same errors in different cases.
  const std::string lower = absl::AsciiStrToLower(detail);
  const bool unix_socket = absl::StartsWith(target, "unix:");
  if (absl::StrContains(lower, "no such file or directory")) {
    return "no such socket (is gpustreamd running, and listening there?)";
  }
  if (absl::StrContains(lower, "connection refused")) {
    return unix_socket ? "nobody listens on this socket (a daemon that "
                         "stopped left it behind?)"
                       : "connection refused: nothing listens on this port";
  }
  if (absl::StrContains(lower, "permission denied")) {
    return "permission denied: the socket is the daemon's user's and its "
           "group's (--unix_socket_group); join the group or run as that "
           "user";
  }
  // OpenSSL says "wrong version number", BoringSSL WRONG_VERSION_NUMBER.
  if (absl::StrContains(lower, "wrong version number") ||
      absl::StrContains(lower, "wrong_version_number")) {
    return "TLS handshake failed: the server does not speak TLS on this "
           "address (connect without TLS, or to its TLS port)";
  }
  if (absl::StrContains(lower, "certificate verify failed") ||
      absl::StrContains(lower, "certificate_verify_failed")) {
    return "TLS handshake failed: the server's certificate did not verify "
           "against the CA given";
  }
  if (absl::StrContains(lower, "ssl handshake failed") ||
      absl::StrContains(lower, "handshake failed")) {
    return "TLS handshake failed";
  }
  if (!tls && !unix_socket && absl::StrContains(lower, "socket closed")) {
    return "TLS handshake failed: the server wants TLS (give the CA that "
           "signed its certificate)";
  }
  return "";
}

}  // namespace

std::string ResolveTarget(const std::string& target) {
  if (!target.empty()) return target;
  std::string env = FromEnv("GPUSTREAM_TARGET");
  return !env.empty() ? env : kDefaultTarget;
}

std::string ResolveToken(const std::string& token) {
  return !token.empty() ? token : FromEnv("GPUSTREAM_TOKEN");
}

absl::Status ExplainConnectFailure(const std::string& target, bool tls,
                                   absl::Duration timeout,
                                   const grpc::Status& status) {
  const std::string prefix = absl::StrCat("connect to ", target, ": ");
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::UnavailableError(
        absl::StrCat(prefix, "no answer within ", absl::FormatDuration(timeout),
                     " (the daemon accepted the connection but is stopped or "
                     "overloaded?)"));
  }
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (code != absl::StatusCode::kUnavailable) {
    return absl::Status(code, prefix + status.error_message());
  }
  const std::string cause = Cause(target, tls, status.error_message());
  if (cause.empty())
    return absl::UnavailableError(prefix + status.error_message());
  return absl::UnavailableError(
      absl::StrCat(prefix, cause, " [", status.error_message(), "]"));
}

}  // namespace gpustream::client
