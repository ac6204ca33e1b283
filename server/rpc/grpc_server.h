// Builds and starts the gRPC server: GpuStream, health and reflection, on
// TLS or plaintext TCP listeners and permission-guarded unix sockets.
#ifndef GPUSTREAM_SERVER_RPC_GRPC_SERVER_H_
#define GPUSTREAM_SERVER_RPC_GRPC_SERVER_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/metrics/metrics.h"
#include "server/rpc/admin_service.h"
#include "server/rpc/gpustream_service.h"
#include "server/session/server_core.h"
#include "server/share/share_server.h"

namespace gpustream::rpc {

// HTTP/2 streams one connection may have open at once.
inline constexpr int kMaxStreamsPerConnection = 1024;

// How to serve. The transport fields are gpustreamd's flags of the same
// names, and errors name them so.
struct ServerOptions {
  // "unix:/path" or "host:port" (port 0 picks one).
  std::vector<std::string> listen;
  int max_message_bytes = 256 << 20;
  // Per Submit stream: bytes of read results promised and not yet sent.
  uint64_t max_pending_result_bytes = uint64_t{256} << 20;

  // PEM files: the server's certificate chain and its private key (no
  // passphrase). Given together, every listener but unix: sockets serves
  // TLS only. Unix sockets stay plaintext: they are local, and file
  // permissions (below) say who may connect.
  std::string tls_cert;
  std::string tls_key;
  // PEM CA bundle (needs tls_cert): client certificates are requested and
  // verified against it (GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY).
  // A certificate is not required: a tenant may authenticate by bearer
  // token or by certificate, so a client without one still connects and
  // must then send a token. A certificate that does not verify fails the
  // handshake (the client sees UNAVAILABLE). Without tls_client_ca no
  // certificate is requested and calls carry no TLS subject.
  std::string tls_client_ca;
  // Plaintext TCP on an address that is not loopback sends bearer tokens
  // and data in the clear; refused unless this is set.
  bool allow_insecure_tcp = false;
  // Unix sockets: the permission bits (at most 0777) and, when not empty,
  // the group (a name, or a numeric gid) they get. The owner is the
  // daemon's user.
  mode_t unix_socket_mode = 0660;
  std::string unix_socket_group;
  // The share socket's path (HOST_SHARED buffers; empty: sharing off). It
  // gets the unix sockets' mode and group.
  std::string share_socket;

  // Served beside GpuStream; not owned, must outlive the server.
  std::vector<grpc::Service*> extra_services;

  // Where every call (by method and code, unary latency) and every stream
  // is counted; nothing is counted if null. Must outlive the server.
  metrics::Metrics* metrics = nullptr;
};

// Whether `address` (a listen address) is a TCP address on loopback only:
// 127.0.0.0/8, ::1 (also IPv4-mapped ::ffff:127.x.x.x) or "localhost", with
// a port. The wildcards 0.0.0.0 and [::] are not; neither is a host name
// other than localhost, nor anything that does not parse.
bool IsLoopbackAddress(absl::string_view address);
bool IsUnixAddress(absl::string_view address);
// The socket path of a unix listen address ("unix:PATH" -> "PATH").
std::string UnixPath(absl::string_view address);
// The share socket beside the first unix listen address ("unix:PATH" ->
// "PATH.share"); empty when there is none or the path would be too long
// for a unix socket.
std::string DefaultShareSocket(const std::vector<std::string>& listen);

// Everything Start checks before it binds, so the daemon can refuse bad
// flags before it brings up devices: tls_cert and tls_key given together
// and tls_client_ca only with them, each file readable and PEM of the
// right kind (the key matching the certificate), the socket mode and
// group, and the rule that a non-loopback TCP address needs TLS or
// allow_insecure_tcp. INVALID_ARGUMENT naming the flag, the path or the
// address, and why.
absl::Status CheckServerOptions(const ServerOptions& options);

class GrpcServer {
 public:
  // Listens on each of `options.listen`. A stale unix socket file is
  // replaced; new unix sockets get `unix_socket_mode` and
  // `unix_socket_group` (see Start's comment in the .cc for how no wider
  // permission is ever visible). INVALID_ARGUMENT as CheckServerOptions
  // says, or naming the address that could not be bound.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      session::ServerCore& core, const ServerOptions& options);
  // Plaintext with the default socket permissions and share socket (tests,
  // benchmarks).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      session::ServerCore& core, const std::vector<std::string>& listen,
      int max_message_bytes,
      const std::vector<grpc::Service*>& extra_services = {});

  // The bound addresses, ports resolved ("127.0.0.1:41231").
  const std::vector<std::string>& addresses() const { return addresses_; }
  // Whether addresses()[i] serves TLS.
  bool tls(size_t i) const { return tls_[i]; }
  grpc::Server& server() { return *server_; }
  // An in-process channel, for tests and benchmarks.
  std::shared_ptr<grpc::Channel> InProcessChannel();

  // Refuses new calls, cancels the rest after `grace`, waits for handlers.
  void Shutdown(absl::Duration grace);

 private:
  GrpcServer(session::ServerCore& core, const SubmitStreamOptions& submit)
      : core_(core), service_(core, submit), admin_(core) {}

  session::ServerCore& core_;
  GpuStreamService service_;
  AdminService admin_;
  std::unique_ptr<share::ShareServer> share_;  // Null: sharing off.
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::string> addresses_;
  std::vector<bool> tls_;
};

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_GRPC_SERVER_H_
