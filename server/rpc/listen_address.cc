// ClaimListenAddress: unix sockets probed by connect, TCP ports by bind.
#include "server/rpc/listen_address.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/rpc/grpc_server.h"

namespace gpustream::rpc {
namespace {

absl::Status InUse(const std::string& address, absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat(
      "--listen=", address, ": address in use (", why,
      "); stop the process that serves it, or choose another address"));
}

absl::Status ClaimUnixSocket(const std::string& address) {
  const std::string path = UnixPath(address);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();  // Free.
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--listen=", address,
                     ": the path exists and is not a socket; remove it or "
                     "choose another path"));
  }
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  if (path.size() >= sizeof(to.sun_path)) return absl::OkStatus();  // gRPC's.
  std::memcpy(to.sun_path, path.c_str(), path.size() + 1);
  // Non-blocking: a live listener with a full backlog says EAGAIN at once.
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("socket(AF_UNIX): ", std::strerror(errno)));
  }
  const int connected =
      connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  const int error = errno;
  close(fd);
  if (connected == 0 || error == EAGAIN || error == EINPROGRESS) {
    return InUse(address, "a process answers on this socket");
  }
  if (error != ECONNREFUSED) {
    return absl::FailedPreconditionError(
        absl::StrCat("--listen=", address,
                     ": cannot tell whether a process serves this "
                     "socket (connect: ",
                     std::strerror(error), "); it was left alone"));
  }
  // Nobody listens: left by a process that died.
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(
        absl::StrCat("--listen=", address,
                     ": a stale socket nobody serves "
                     "cannot be removed: ",
                     std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ClaimTcpAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return absl::OkStatus();  // gRPC's to say.
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (port == "0") return absl::OkStatus();
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints,
                  &found) != 0) {
    return absl::OkStatus();  // gRPC reports an address it cannot resolve.
  }
  absl::Status status;
  for (addrinfo* a = found; a != nullptr && status.ok(); a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // As gRPC binds: SO_REUSEADDR (a port in TIME_WAIT is free), no
    // SO_REUSEPORT (a port another socket listens on is not).
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE) {
      status = InUse(address, "another socket listens on this port");
    }
    close(fd);
  }
  freeaddrinfo(found);
  return status;
}

}  // namespace

absl::Status ClaimListenAddress(const std::string& address) {
  return IsUnixAddress(address) ? ClaimUnixSocket(address)
                                : ClaimTcpAddress(address);
}

}  // namespace gpustream::rpc
