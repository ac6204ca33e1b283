// The share socket: where a client on the same host trades a share ticket
// for the memfd of a HOST_SHARED buffer (docs/api.md, "Shared host
// memory").
#ifndef GPUSTREAM_SERVER_SHARE_SHARE_SERVER_H_
#define GPUSTREAM_SERVER_SHARE_SHARE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/share/share_tickets.h"

namespace gpustream::share {

// The request a client sends (all integers little-endian):
//   "GSSHARE1"                 8 bytes
//   u16 session_id length      at most kMaxSessionIdBytes
//   session_id
//   u16 ticket length          at most kMaxTicketBytes
//   ticket
// The answer to a good ticket: 8 bytes (u64, the buffer's size in bytes)
// with the memfd attached (SCM_RIGHTS), then the daemon closes the
// connection. Anything else (a wrong, used or expired ticket, another
// session's, a malformed request, nothing within the deadline) gets the
// connection closed and nothing more.
inline constexpr char kShareMagic[] = "GSSHARE1";
inline constexpr size_t kMaxSessionIdBytes = 256;
inline constexpr size_t kMaxTicketBytes = 64;

// Connections at once: past this many the share server stops accepting
// until one ends (the rest wait in the listen backlog).
inline constexpr size_t kMaxShareConnections = 256;

// Serves the socket on one thread of its own, every connection at once
// (non-blocking, one poll loop): each must send its whole request within
// `deadline` (1 s) or is closed, so peers that connect and stall delay no
// one else's fetch. The socket's permissions (the gRPC unix sockets', set
// by the caller) say who may connect at all.
class ShareServer {
 public:
  // Binds and listens on `path` (a stale socket there is the caller's to
  // remove, as for --listen), then serves. The file gets 0777 & ~umask:
  // the caller holds a restrictive umask and sets the permissions after.
  // INVALID_ARGUMENT naming the path when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<ShareServer>> Start(
      ShareTickets* tickets, std::string path,
      absl::Duration deadline = absl::Seconds(1));
  // Stop()s.
  ~ShareServer();
  ShareServer(const ShareServer&) = delete;
  ShareServer& operator=(const ShareServer&) = delete;

  // Stops serving and removes the socket file. Idempotent.
  void Stop();

  const std::string& path() const { return path_; }
  // Connections answered with a descriptor, and closed without one.
  uint64_t answered() const { return answered_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  ShareServer(ShareTickets* tickets, std::string path, int listen_fd,
              int wake_fd, absl::Duration deadline)
      : tickets_(tickets),
        path_(std::move(path)),
        listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        deadline_(deadline) {}

  void Serve();
  // Answers a complete request on `conn` (sends the memfd); closes nothing.
  absl::Status Answer(int conn, absl::string_view session_id,
                      absl::string_view ticket);

  ShareTickets* const tickets_;
  const std::string path_;
  const int listen_fd_;
  const int wake_fd_;  // An eventfd: written by Stop.
  const absl::Duration deadline_;
  std::atomic<uint64_t> answered_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace gpustream::share

#endif  // GPUSTREAM_SERVER_SHARE_SHARE_SERVER_H_
