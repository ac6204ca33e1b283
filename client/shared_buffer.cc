// The share socket's client side: send a ticket, receive a memfd, map it.
#include "client/shared_buffer.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpustream::client {
namespace {

// The daemon's wire format (docs/api.md, "Shared host memory").
constexpr char kMagic[] = "GSSHARE1";

void AppendU16(std::string* out, size_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>((v >> 8) & 0xff));
}

}  // namespace

absl::StatusOr<std::shared_ptr<SharedMapping>> SharedMapping::Fetch(
    const std::string& socket_path, const std::string& session_id,
    const std::string& ticket) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("share socket path \"", socket_path, "\" is not usable"));
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) {
    return absl::UnavailableError(
        absl::StrCat("share socket: ", std::strerror(errno)));
  }
  absl::Cleanup close_sock = [sock] { close(sock); };
  // The daemon answers within about a second; never wait forever. (A unix
  // socket's connect waits for room in a full backlog up to SO_SNDTIMEO.)
  timeval timeout{10, 0};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to share socket ", socket_path, ": ",
                     std::strerror(errno)));
  }
  std::string request(kMagic, sizeof(kMagic) - 1);
  AppendU16(&request, session_id.size());
  request += session_id;
  AppendU16(&request, ticket.size());
  request += ticket;
  if (send(sock, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return absl::UnavailableError(absl::StrCat(
        "sending to share socket ", socket_path, ": ", std::strerror(errno)));
  }
  char size_bytes[8];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{size_bytes, sizeof(size_bytes)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  } while (got < 0 && errno == EINTR);
  int fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(&fd, CMSG_DATA(c), sizeof(fd));
    }
  }
  absl::Cleanup close_fd = [fd] {
    if (fd >= 0) close(fd);
  };
  if (got != static_cast<ssize_t>(sizeof(size_bytes)) || fd < 0) {
    return absl::PermissionDeniedError(
        "the share socket refused the ticket (wrong, used, expired, or the "
        "buffer is already freed)");
  }
  uint64_t size = 0;
  for (int i = 0; i < 8; ++i) {
    size |= uint64_t{static_cast<uint8_t>(size_bytes[i])} << (8 * i);
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t mapped = size == 0 ? page : (size + page - 1) / page * page;
  void* data = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "mapping ", size, " shared bytes: ", std::strerror(errno)));
  }
  return std::shared_ptr<SharedMapping>(
      new SharedMapping(static_cast<std::byte*>(data), size, mapped));
}

SharedMapping::~SharedMapping() { munmap(data_, mapped_); }

}  // namespace gpustream::client
