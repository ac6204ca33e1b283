// gRPC server construction: credentials, listeners, socket permissions.
#include "server/rpc/grpc_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/rpc/call_interceptor.h"
#include "server/rpc/listen_address.h"

namespace gpustream::rpc {
namespace {

constexpr absl::string_view kUnixPrefix = "unix:";

// The whole of the file `path`, given by --`flag`.
absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag,
                                         const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", path, ": cannot be read: ", std::strerror(errno)));
  }
  std::string contents;
  char buffer[8192];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, "=", path, ": cannot be read: ", std::strerror(error)));
    }
    contents.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return contents;
}

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct EvpPkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

std::unique_ptr<BIO, BioFree> MemoryBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// OpenSSL's default passphrase callback would prompt on the terminal; an
// encrypted key is refused instead (gRPC could not use it either).
int NoPassphrase(char*, int, int, void*) { return -1; }

// The PEM certificates in `pem`, in order (the leaf first, for a chain).
std::vector<X509Ptr> PemCertificates(const std::string& pem) {
  std::vector<X509Ptr> certs;
  auto bio = MemoryBio(pem);
  if (bio == nullptr) return certs;
  while (X509* cert =
             PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    certs.emplace_back(cert);
  }
  ERR_clear_error();  // The end of the input reads as an error.
  return certs;
}

// The PEM material of the TLS listeners; empty when TLS is off.
struct TlsMaterial {
  std::string cert_chain, private_key, client_ca;
};

// Reads and checks the TLS files now, so a bad path or a key that belongs
// to another certificate is a clear start-up error rather than a listener
// that gRPC silently fails to build, or handshakes that fail later.
absl::StatusOr<std::optional<TlsMaterial>> LoadTls(
    const ServerOptions& options) {
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both (PEM files: the "
        "server's certificate chain and its private key) or neither");
  }
  if (options.tls_cert.empty()) {
    if (!options.tls_client_ca.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_client_ca=", options.tls_client_ca,
          " needs --tls_cert and --tls_key: client certificates are only "
          "requested over TLS"));
    }
    return std::nullopt;
  }
  TlsMaterial tls;
  auto cert = ReadFlagFile("tls_cert", options.tls_cert);
  if (!cert.ok()) return cert.status();
  tls.cert_chain = *std::move(cert);
  const std::vector<X509Ptr> chain = PemCertificates(tls.cert_chain);
  if (chain.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_cert=", options.tls_cert, ": holds no PEM certificate"));
  }
  auto key = ReadFlagFile("tls_key", options.tls_key);
  if (!key.ok()) return key.status();
  tls.private_key = *std::move(key);
  auto key_bio = MemoryBio(tls.private_key);
  std::unique_ptr<EVP_PKEY, EvpPkeyFree> pkey(
      key_bio == nullptr ? nullptr
                         : PEM_read_bio_PrivateKey(key_bio.get(), nullptr,
                                                   NoPassphrase, nullptr));
  ERR_clear_error();
  if (pkey == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key=", options.tls_key,
                     ": holds no PEM private key without a passphrase"));
  }
  if (X509_check_private_key(chain.front().get(), pkey.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key=", options.tls_key, " is not the key of the certificate in ",
        "--tls_cert=", options.tls_cert));
  }
  if (!options.tls_client_ca.empty()) {
    auto ca = ReadFlagFile("tls_client_ca", options.tls_client_ca);
    if (!ca.ok()) return ca.status();
    tls.client_ca = *std::move(ca);
    if (PemCertificates(tls.client_ca).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_client_ca=", options.tls_client_ca,
                       ": holds no PEM certificate"));
    }
  }
  return tls;
}

// The gid of --unix_socket_group: a group name, else a number.
absl::StatusOr<gid_t> ResolveGroup(const std::string& group) {
  long size = sysconf(_SC_GETGR_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
  for (;;) {
    struct group entry;
    struct group* found = nullptr;
    const int error =
        getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (error == ERANGE) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    if (found != nullptr) return found->gr_gid;
    break;
  }
  uint32_t gid;
  if (absl::SimpleAtoi(group, &gid)) return static_cast<gid_t>(gid);
  return absl::InvalidArgumentError(
      absl::StrCat("--unix_socket_group=", group, ": no such group"));
}

// What Start needs beyond `options`, checked.
struct Prepared {
  std::optional<TlsMaterial> tls;
  std::optional<gid_t> group;
};

absl::StatusOr<Prepared> Prepare(const ServerOptions& options) {
  Prepared prepared;
  for (const std::string& address : options.listen) {
    if (!options.share_socket.empty() && IsUnixAddress(address) &&
        UnixPath(address) == options.share_socket) {
      return absl::InvalidArgumentError(
          absl::StrCat("--share_socket=", options.share_socket,
                       ": the same path as --listen=", address,
                       "; give the share socket a path of its own"));
    }
  }
  auto tls = LoadTls(options);
  if (!tls.ok()) return tls.status();
  prepared.tls = *std::move(tls);
  if (!prepared.tls.has_value() && !options.allow_insecure_tcp) {
    for (const std::string& address : options.listen) {
      if (IsUnixAddress(address) || IsLoopbackAddress(address)) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "refusing to listen on ", address,
          " without TLS: it is not a loopback address, so bearer tokens and "
          "data would cross the network in plaintext. Give --tls_cert and "
          "--tls_key (and --tls_client_ca for client certificates), listen on "
          "loopback (127.0.0.1, ::1, localhost) or a unix: socket, or pass "
          "--allow_insecure_tcp to serve plaintext TCP anyway"));
    }
  }
  if ((options.unix_socket_mode & ~mode_t{0777}) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--unix_socket_mode=%04o: only permission bits (at most 0777)",
        static_cast<unsigned>(options.unix_socket_mode)));
  }
  if (!options.unix_socket_group.empty()) {
    auto gid = ResolveGroup(options.unix_socket_group);
    if (!gid.ok()) return gid.status();
    prepared.group = *gid;
  }
  return prepared;
}

// Gives each new unix socket its group and mode. bind() inside
// BuildAndStart creates the file with 0777 & ~umask; Start runs it under
// umask 0177, so until this runs the socket is the daemon user's alone
// (0600) and never, even briefly, open to anyone else. The group comes
// before the mode so the group bits never apply to the wrong group.
absl::Status ApplySocketPermissions(const ServerOptions& options,
                                    const Prepared& prepared) {
  std::vector<std::string> paths;
  for (const std::string& address : options.listen) {
    if (IsUnixAddress(address)) paths.push_back(UnixPath(address));
  }
  if (!options.share_socket.empty()) paths.push_back(options.share_socket);
  for (const std::string& path : paths) {
    if (prepared.group.has_value() &&
        chown(path.c_str(), static_cast<uid_t>(-1), *prepared.group) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--unix_socket_group=", options.unix_socket_group, ": cannot give ",
          path, " to the group: ", std::strerror(errno)));
    }
    if (chmod(path.c_str(), options.unix_socket_mode) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--unix_socket_mode=%04o: cannot chmod %s: %s",
                          static_cast<unsigned>(options.unix_socket_mode), path,
                          std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string UnixPath(absl::string_view address) {
  return std::string(address.substr(kUnixPrefix.size()));
}

std::string DefaultShareSocket(const std::vector<std::string>& listen) {
  for (const std::string& address : listen) {
    if (!IsUnixAddress(address)) continue;
    std::string path = UnixPath(address) + ".share";
    return path.size() < sizeof(sockaddr_un::sun_path) ? path : "";
  }
  return "";
}

bool IsUnixAddress(absl::string_view address) {
  return absl::StartsWith(address, kUnixPrefix);
}

bool IsLoopbackAddress(absl::string_view address) {
  // "host:port" or "[v6]:port". An unbracketed host with a colon (a bare
  // IPv6 address) is ambiguous, and refused as not loopback.
  absl::string_view host;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos ||
        !absl::StartsWith(address.substr(close + 1), ":")) {
      return false;
    }
    host = address.substr(1, close - 1);
  } else {
    const size_t colon = address.find(':');
    if (colon == absl::string_view::npos ||
        address.find(':', colon + 1) != absl::string_view::npos) {
      return false;
    }
    host = address.substr(0, colon);
  }
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string text(host);
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

absl::Status CheckServerOptions(const ServerOptions& options) {
  return Prepare(options).status();
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    session::ServerCore& core, const std::vector<std::string>& listen,
    int max_message_bytes, const std::vector<grpc::Service*>& extra_services) {
  ServerOptions options;
  options.listen = listen;
  options.max_message_bytes = max_message_bytes;
  options.extra_services = extra_services;
  options.share_socket = DefaultShareSocket(listen);
  return Start(core, options);
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    session::ServerCore& core, const ServerOptions& options) {
  auto prepared = Prepare(options);
  if (!prepared.ok()) return prepared.status();
  std::shared_ptr<grpc::ServerCredentials> network =
      grpc::InsecureServerCredentials();
  if (prepared->tls.has_value()) {
    // With a client CA: request a certificate and verify one that comes,
    // but do not require one, since a tenant may authenticate by token.
    grpc::SslServerCredentialsOptions ssl(
        prepared->tls->client_ca.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = prepared->tls->client_ca;
    ssl.pem_key_cert_pairs.push_back(
        {prepared->tls->private_key, prepared->tls->cert_chain});
    network = grpc::SslServerCredentials(ssl);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  SubmitStreamOptions submit;
  submit.max_pending_result_bytes = options.max_pending_result_bytes;
  submit.max_message_bytes = static_cast<uint64_t>(options.max_message_bytes);
  submit.metrics = options.metrics;
  auto server = std::unique_ptr<GrpcServer>(new GrpcServer(core, submit));
  grpc::ServerBuilder builder;
  builder.RegisterService(&server->service_);
  builder.RegisterService(&server->admin_);
  for (grpc::Service* service : options.extra_services)
    builder.RegisterService(service);
  // Ping idle connections so a client that vanished without closing (a
  // partition, a dead host) stops holding its session's lease: its streams
  // end within about 40 s and the lease clock starts.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Streams per connection: each costs the daemon about 12 KiB even when
  // its peer never finishes sending, and gRPC sets no limit of its own. The
  // clients use two streams per session plus unary calls; a user of raw
  // stubs that parks many unary waits on one connection gets up to this
  // many at once (more wait in the client until one ends).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             kMaxStreamsPerConnection);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(
      std::make_unique<CallInterceptorFactory>(options.metrics));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  const std::vector<std::string>& listen = options.listen;
  std::vector<int> ports(listen.size(), 0);
  bool any_unix = false;
  // Never another live process's address: no SO_REUSEPORT, and a unix
  // socket that answers is refused, not replaced (listen_address.h).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (const std::string& address : listen) {
    if (absl::Status s = ClaimListenAddress(address); !s.ok()) return s;
  }
  const std::string& share_socket = options.share_socket;
  if (!share_socket.empty()) {
    const std::string address = absl::StrCat(kUnixPrefix, share_socket);
    if (absl::Status s = ClaimListenAddress(address); !s.ok()) {
      // Its message names --listen; this path came from --share_socket.
      return absl::Status(
          s.code(),
          absl::StrCat("--share_socket=", share_socket, ": ", s.message()));
    }
  }
  for (size_t i = 0; i < listen.size(); ++i) {
    const bool unix_socket = IsUnixAddress(listen[i]);
    any_unix |= unix_socket;
    builder.AddListeningPort(
        listen[i], unix_socket ? grpc::InsecureServerCredentials() : network,
        &ports[i]);
    server->tls_.push_back(!unix_socket && prepared->tls.has_value());
  }
  // Sockets are bound in BuildAndStart: see ApplySocketPermissions. umask
  // is process-wide, so a file another thread creates meanwhile is made
  // 0600 at most too: stricter, never looser.
  const bool restrict = any_unix || !share_socket.empty();
  const mode_t saved_umask = restrict ? umask(0177) : 0;
  if (!share_socket.empty()) {
    auto share = share::ShareServer::Start(&core.share_tickets(), share_socket);
    if (!share.ok()) {
      umask(saved_umask);
      return share.status();
    }
    server->share_ = *std::move(share);
    core.share_tickets().set_socket_path(share_socket);
  }
  server->server_ = builder.BuildAndStart();
  if (restrict) umask(saved_umask);
  if (server->server_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on --listen=", absl::StrJoin(listen, ",")));
  }
  for (size_t i = 0; i < listen.size(); ++i) {
    if (ports[i] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot listen on ", listen[i]));
    }
    if (IsUnixAddress(listen[i])) {
      server->addresses_.push_back(listen[i]);
    } else {
      const std::string host = listen[i].substr(0, listen[i].rfind(':'));
      server->addresses_.push_back(absl::StrCat(host, ":", ports[i]));
    }
  }
  if (absl::Status s = ApplySocketPermissions(options, *prepared); !s.ok()) {
    server->Shutdown(absl::ZeroDuration());
    return s;
  }
  return server;
}

std::shared_ptr<grpc::Channel> GrpcServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return server_->InProcessChannel(args);
}

void GrpcServer::Shutdown(absl::Duration grace) {
  if (share_ != nullptr) {
    // No more tickets nobody could redeem.
    core_.share_tickets().StopServing();
    share_->Stop();
  }
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
}

}  // namespace gpustream::rpc
