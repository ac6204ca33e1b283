// How gpustreamctl reaches the daemon: the options resolved from flags and
// the environment, and the channel with its per-call contexts.
#ifndef GPUSTREAM_TOOLS_GPUSTREAMCTL_CONNECTION_H_
#define GPUSTREAM_TOOLS_GPUSTREAMCTL_CONNECTION_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/connect_failure.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"

namespace gpustream::ctl {

// The daemon's default address, as in gpustreamd and the clients.
using client::kDefaultTarget;

// What the user gave: flag values (empty: not given) and the environment.
struct RawOptions {
  std::string target;      // --target
  std::string token;       // --token
  std::string token_file;  // --token_file
  std::string tls_ca, tls_cert, tls_key;
  absl::Duration timeout = absl::Seconds(5);
  bool json = false;
  std::string env_target;  // $GPUSTREAM_TARGET
  std::string env_token;   // $GPUSTREAM_TOKEN
};

struct Options {
  std::string target;
  // The bearer token, or empty. Never printed, logged or put in an error.
  std::string token;
  std::optional<client::TlsOptions> tls;
  absl::Duration timeout;  // Per call.
  bool json = false;
};

// Resolves `raw`: target from --target, else $GPUSTREAM_TARGET, else
// kDefaultTarget; token from --token or --token_file (not both), else
// $GPUSTREAM_TOKEN, else, for a unix: target, the daemon's operator token
// file beside the socket when this user can read it; TLS when any --tls_* flag
// is given. InvalidArgument (a usage error) for both token flags, an unreadable
// or empty token file, a token that cannot travel in a header, unreadable TLS
// files, TLS on a unix: target, or a timeout that is not positive. Messages
// name files and flags, never the token.
absl::StatusOr<Options> ResolveOptions(const RawOptions& raw);

// One channel to the daemon. Calls fail fast (no wait-for-ready): a daemon
// that is not there is UNAVAILABLE at once, one that does not answer is
// DEADLINE_EXCEEDED after the timeout.
class Connection {
 public:
  explicit Connection(Options options);

  const Options& options() const { return options_; }

  // A context for one call: the bearer token (if any) and a deadline of
  // now + options().timeout.
  std::unique_ptr<grpc::ClientContext> NewContext() const;

  v1::GpuStream::Stub& gpustream() const { return *gpustream_; }
  v1::Admin::Stub& admin() const { return *admin_; }
  grpc::health::v1::Health::Stub& health() const { return *health_; }

 private:
  Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::GpuStream::Stub> gpustream_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace gpustream::ctl

#endif  // GPUSTREAM_TOOLS_GPUSTREAMCTL_CONNECTION_H_
