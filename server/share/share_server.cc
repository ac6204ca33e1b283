// The share socket's accept loop and its one-message protocol.
#include "server/share/share_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

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

enum class Parse { kIncomplete, kMalformed, kComplete };

// Parses what a connection sent so far (see the wire format in the header).
Parse ParseRequest(absl::string_view in, absl::string_view* session_id,
                   absl::string_view* ticket) {
  if (in.size() < kMagicBytes) {
    return in == absl::string_view(kShareMagic, in.size()) ? Parse::kIncomplete
                                                           : Parse::kMalformed;
  }
  if (in.substr(0, kMagicBytes) !=
      absl::string_view(kShareMagic, kMagicBytes)) {
    return Parse::kMalformed;
  }
  size_t at = kMagicBytes;
  if (in.size() < at + 2) return Parse::kIncomplete;
  const size_t id_bytes = LoadU16(in.data() + at);
  if (id_bytes > kMaxSessionIdBytes) return Parse::kMalformed;
  at += 2;
  if (in.size() < at + id_bytes + 2) return Parse::kIncomplete;
  *session_id = in.substr(at, id_bytes);
  at += id_bytes;
  const size_t ticket_bytes = LoadU16(in.data() + at);
  if (ticket_bytes > kMaxTicketBytes) return Parse::kMalformed;
  at += 2;
  if (in.size() < at + ticket_bytes) return Parse::kIncomplete;
  if (in.size() > at + ticket_bytes) return Parse::kMalformed;
  *ticket = in.substr(at, ticket_bytes);
  return Parse::kComplete;
}

// A connection being read.
struct Connection {
  int fd;
  absl::Time until;
  std::string in;
};

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
  std::vector<Connection> conns;
  absl::Time accept_paused_until = absl::InfinitePast();
  auto finish = [this](Connection& c, const absl::Status& s) {
    if (s.ok()) {
      answered_.fetch_add(1);
    } else {
      refused_.fetch_add(1);
      // Debug only: a peer must not be able to flood the log.
      log::Debug("share_refused").Str("why", s.message());
    }
    close(c.fd);
    c.fd = -1;
  };
  while (true) {
    const absl::Time now = absl::Now();
    const bool accepting =
        conns.size() < kMaxShareConnections && now >= accept_paused_until;
    std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}, {listen_fd_, 0, 0}};
    if (accepting) fds[1].events = POLLIN;
    // At most a second: expired tickets are swept (closing their
    // descriptors) even when nobody presents or issues one.
    absl::Time next = now + absl::Seconds(1);
    if (!accepting && accept_paused_until > now) {
      next = std::min(next, accept_paused_until);
    }
    for (const Connection& c : conns) {
      fds.push_back({c.fd, POLLIN, 0});
      next = std::min(next, c.until);
    }
    const int timeout_ms = static_cast<int>(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(next - now) + 1));
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      log::Error("share_socket_failed").Str("error", std::strerror(errno));
      tickets_->StopServing();  // Advertise nothing nobody answers.
      break;
    }
    if (fds[0].revents != 0) break;
    tickets_->DropExpired();
    for (size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      const short revents = fds[i + 2].revents;
      if (revents != 0) {
        char chunk[512];
        const ssize_t got = recv(c.fd, chunk, sizeof(chunk), MSG_DONTWAIT);
        if (got > 0) c.in.append(chunk, static_cast<size_t>(got));
        absl::string_view session_id, ticket;
        const Parse parsed = ParseRequest(c.in, &session_id, &ticket);
        if (parsed == Parse::kComplete) {
          finish(c, Answer(c.fd, session_id, ticket));
          continue;
        }
        if (parsed == Parse::kMalformed || got == 0 ||
            (got < 0 && errno != EAGAIN && errno != EINTR)) {
          finish(c, absl::InvalidArgumentError("not a share request"));
          continue;
        }
      }
      if (absl::Now() >= c.until) {
        finish(c, absl::DeadlineExceededError("no whole request in time"));
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(),
                               [](const Connection& c) { return c.fd < 0; }),
                conns.end());
    if (accepting && (fds[1].revents & POLLIN) != 0) {
      const int conn =
          accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (conn >= 0) {
        conns.push_back({conn, absl::Now() + deadline_, {}});
      } else if (errno == EMFILE || errno == ENFILE || errno == ENOMEM ||
                 errno == ENOBUFS) {
        // Out of descriptors: the backlog stays readable, so accepting
        // again at once would spin; wait a little.
        accept_paused_until = absl::Now() + absl::Milliseconds(100);
        log::Warning("share_socket_accept").Str("error", std::strerror(errno));
      }
    }
  }
  for (Connection& c : conns) close(c.fd);
}

absl::Status ShareServer::Answer(int conn, absl::string_view session_id,
                                 absl::string_view ticket) {
  absl::StatusOr<ShareTickets::Redeemed> redeemed =
      tickets_->Redeem(session_id, ticket);
  if (!redeemed.ok()) return redeemed.status();
  const int fd = redeemed->fd;
  char size[8];
  for (int i = 0; i < 8; ++i) {
    size[i] = static_cast<char>(redeemed->size >> (8 * i));
  }
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
  std::memcpy(CMSG_DATA(c), &fd, sizeof(fd));
  // 8 bytes into a connection the peer has not read from: room enough
  // (non-blocking, a full buffer fails rather than stalls the loop).
  const ssize_t sent = sendmsg(conn, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  const int err = errno;
  close(fd);  // The peer has its own now, or never will.
  if (sent != static_cast<ssize_t>(sizeof(size))) {
    return absl::UnavailableError(
        absl::StrCat("sending the descriptor: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace gpustream::share
