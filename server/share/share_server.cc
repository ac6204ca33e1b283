// The share socket's accept loop and its one-message protocol.
#include "server/share/share_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/log/log.h"

namespace gpustream::share {
namespace {

constexpr size_t kMagicBytes = sizeof(kShareMagic) - 1;

uint16_t LoadU16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) |
                               static_cast<uint8_t>(p[1]) << 8);
}

// Reads exactly `n` more bytes into `out` before `until`; false on EOF,
// error or timeout.
bool ReadFull(int fd, std::string* out, size_t n, absl::Time until) {
  const size_t want = out->size() + n;
  char chunk[512];
  while (out->size() < want) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready =
        poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t got = recv(
        fd, chunk, std::min(sizeof(chunk), want - out->size()), MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return false;
    out->append(chunk, static_cast<size_t>(got));
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShareServer>> ShareServer::Start(
    ShareTickets* tickets, std::string path, absl::Duration deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("share socket path \"", path, "\": want 1 to ",
                     sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("share socket: ", std::strerror(errno)));
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 64) != 0) {
    const int err = errno;
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot listen on share socket ", path, ": ", std::strerror(err)));
  }
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    const int err = errno;
    close(fd);
    unlink(path.c_str());
    return absl::InvalidArgumentError(
        absl::StrCat("share socket eventfd: ", std::strerror(err)));
  }
  auto server = std::unique_ptr<ShareServer>(
      new ShareServer(tickets, std::move(path), fd, wake, deadline));
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

ShareServer::~ShareServer() {
  Stop();
  close(listen_fd_);
  close(wake_fd_);
}

void ShareServer::Stop() {
  if (stopped_.exchange(true)) return;
  const uint64_t one = 1;
  // An eventfd write of 1 cannot block or fail short.
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
  unlink(path_.c_str());
}

void ShareServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log::Error("share_socket_failed").Str("error", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;  // The peer went, or out of descriptors: later.
    if (absl::Status s = Answer(conn); s.ok()) {
      answered_.fetch_add(1);
    } else {
      refused_.fetch_add(1);
      log::Info("share_refused").Str("why", s.message());
    }
    close(conn);
  }
}

absl::Status ShareServer::Answer(int conn) {
  const absl::Time until = absl::Now() + deadline_;
  std::string in;
  if (!ReadFull(conn, &in, kMagicBytes + 2, until) ||
      in.compare(0, kMagicBytes, kShareMagic) != 0) {
    return absl::InvalidArgumentError("not a share request");
  }
  const size_t id_bytes = LoadU16(in.data() + kMagicBytes);
  if (id_bytes > kMaxSessionIdBytes ||
      !ReadFull(conn, &in, id_bytes + 2, until)) {
    return absl::InvalidArgumentError("bad session id");
  }
  const size_t ticket_bytes = LoadU16(in.data() + kMagicBytes + 2 + id_bytes);
  if (ticket_bytes > kMaxTicketBytes ||
      !ReadFull(conn, &in, ticket_bytes, until)) {
    return absl::InvalidArgumentError("bad ticket");
  }
  const absl::string_view session_id(in.data() + kMagicBytes + 2, id_bytes);
  const absl::string_view ticket(in.data() + kMagicBytes + 4 + id_bytes,
                                 ticket_bytes);
  absl::StatusOr<std::shared_ptr<const backend::SharedRegion>> region =
      tickets_->Redeem(session_id, ticket);
  if (!region.ok()) return region.status();

  char size[8];
  const uint64_t bytes = (*region)->size();
  for (int i = 0; i < 8; ++i) size[i] = static_cast<char>(bytes >> (8 * i));
  iovec iov{size, sizeof(size)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  const int fd = (*region)->fd();
  std::memcpy(CMSG_DATA(c), &fd, sizeof(fd));
  // The peer's receive buffer holds 8 bytes: this never blocks for long.
  if (sendmsg(conn, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(size))) {
    return absl::UnavailableError(
        absl::StrCat("sending the descriptor: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace gpustream::share
