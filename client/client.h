// The entry point of the C++ client: connect to gpustreamd, discover
// devices and modules, open sessions.
#ifndef GPUSTREAM_CLIENT_CLIENT_H_
#define GPUSTREAM_CLIENT_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/kernel_signatures.h"
#include "client/session.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/version.h"

namespace gpustream::client {

// TLS for a TCP target. PEM text, not paths (see TlsOptions::FromFiles).
struct TlsOptions {
  // The CA that signed the daemon's certificate; empty: the system roots.
  std::string root_certificates;
  // A client certificate and its key, for daemons that map certificate
  // subjects to tenants (mutual TLS); both or neither.
  std::string certificate_chain;
  std::string private_key;

  // Reads the files named (an empty path leaves its field empty); the error
  // names the file that could not be read.
  static absl::StatusOr<TlsOptions> FromFiles(const std::string& ca_path,
                                              const std::string& cert_path,
                                              const std::string& key_path);
};

struct ConnectOptions {
  // How long to wait for the daemon to answer the version handshake.
  absl::Duration timeout = absl::Seconds(10);
  // The bearer token, where the daemon requires one (sent as
  // "authorization: Bearer <token>" on every call). Empty: $GPUSTREAM_TOKEN
  // if set.
  std::string token;
  // Set: the channel uses TLS; unset: plaintext (unix sockets, loopback).
  std::optional<TlsOptions> tls;
};

// The channel Client::Connect would open: plaintext or TLS per `options`,
// with no message size cap. For tools that call services the Client does
// not wrap (Admin, health) with the same credentials.
std::shared_ptr<grpc::Channel> OpenChannel(const std::string& target,
                                           const ConnectOptions& options);

// This library's version: the project's one number, the daemon's too.
inline constexpr const char* kClientVersion = kServerVersion;

struct SessionOptions {
  uint32_t device_id = 0;
  std::string client_name;
  uint32_t lease_seconds = 0;  // 0: the server's default.
  // How long an enqueue may wait for room while SessionCore's
  // kMaxPendingBytes of commands are still unsent (the daemon is not
  // reading them: its own bounds hold the stream). Past it the command is
  // not sent and the queue's next synchronize() or read() reports
  // DEADLINE_EXCEEDED. Zero: an enqueue waits as long as the session lives
  // (until the daemon reads, the stream breaks or the session closes).
  absl::Duration enqueue_timeout = absl::ZeroDuration();
};

// Thread-safe; cheap to copy (shares the channel).
class Client {
 public:
  // The protocol versions this library speaks.
  static constexpr uint32_t kMinVersion = 1;
  static constexpr uint32_t kMaxVersion = 1;

  // `target`: "unix:/path" or "host:port"; empty: $GPUSTREAM_TARGET if set,
  // else kDefaultTarget ("unix:/tmp/gpustreamd.sock"). Negotiates the
  // protocol version: FAILED_PRECONDITION if none is shared; UNAVAILABLE at
  // once when the daemon cannot be reached, naming the target and the cause
  // ("no such socket", "TLS handshake failed: the server wants TLS"...), or
  // when it does not answer within `timeout`. Nothing is retried: a daemon
  // still starting is not there yet (wait for its --ready_file).
  static absl::StatusOr<Client> Connect(const std::string& target = "",
                                        const ConnectOptions& options = {});
  // Over an existing channel (in-process servers, custom credentials).
  static absl::StatusOr<Client> Connect(std::shared_ptr<grpc::Channel> channel,
                                        const ConnectOptions& options = {});

  uint32_t protocol_version() const { return version_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  v1::GpuStream::Stub& stub() const { return *stub_; }

  absl::StatusOr<v1::GetServerInfoResponse> server_info() const;
  absl::StatusOr<std::vector<v1::Device>> list_devices() const;
  absl::StatusOr<std::vector<v1::Module>> list_modules() const;

  absl::StatusOr<std::unique_ptr<Session>> open_session(
      const SessionOptions& options = {}) const;

 private:
  // The version handshake and the kernel signatures over `channel`;
  // `target` names it in errors.
  static absl::StatusOr<Client> Establish(
      std::shared_ptr<grpc::Channel> channel, const std::string& target,
      const ConnectOptions& options);
  Client(std::shared_ptr<grpc::Channel> channel, std::string token,
         uint32_t version, std::shared_ptr<const KernelSignatures> signatures);
  // A context carrying the token.
  std::unique_ptr<grpc::ClientContext> NewContext() const;

  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<v1::GpuStream::Stub> stub_;
  std::string token_;
  uint32_t version_;
  // Fetched at Connect; every session checks launches against them.
  std::shared_ptr<const KernelSignatures> signatures_;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_CLIENT_H_
