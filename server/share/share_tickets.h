// Tickets that trade for a shared buffer's memory on the share socket.
#ifndef GPUSTREAM_SERVER_SHARE_SHARE_TICKETS_H_
#define GPUSTREAM_SERVER_SHARE_SHARE_TICKETS_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/shared_region.h"

namespace gpustream::share {

// Bytes of a ticket: 128 random bits from the kernel's CSPRNG.
inline constexpr size_t kTicketBytes = 16;

// Every ticket AllocateBuffer(HOST_SHARED) issued and nobody presented yet.
// A ticket is single use, valid for `lifetime` after it was issued, and
// bound to the session that allocated the buffer. It does not hold the
// memory: once the buffer is gone (freed, its work done) the ticket gets
// nothing. Expired tickets are dropped as new ones are issued; a closed
// session's by Forget. Thread-safe.
class ShareTickets {
 public:
  explicit ShareTickets(absl::Duration lifetime = absl::Seconds(30))
      : lifetime_(lifetime) {}

  // A new ticket (kTicketBytes raw bytes) for `region`.
  std::string Issue(const std::string& session_id,
                    std::weak_ptr<const backend::SharedRegion> region);

  // The region `ticket` was issued for, if `session_id` is its session, it
  // has not expired and the region still lives; else NOT_FOUND, saying
  // nothing about which of these failed (the answer goes nowhere but the
  // log). A presented ticket is used up whatever the answer.
  absl::StatusOr<std::shared_ptr<const backend::SharedRegion>> Redeem(
      absl::string_view session_id, absl::string_view ticket);

  // Drops the tickets of a session that closed.
  void Forget(const std::string& session_id);

  // Tickets issued and neither presented nor dropped yet.
  size_t outstanding() const;

  // Where tickets are redeemed: the share socket's path, empty while
  // sharing is off (HOST_SHARED allocations are then refused). Set once,
  // before the daemon serves; read-only after.
  void set_socket_path(std::string path) { socket_path_ = std::move(path); }
  const std::string& socket_path() const { return socket_path_; }

 private:
  struct Entry {
    std::string session_id;
    std::weak_ptr<const backend::SharedRegion> region;
    absl::Time expires;
  };
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration lifetime_;
  std::string socket_path_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> by_ticket_ ABSL_GUARDED_BY(mu_);
  // Tickets in the order they expire (a constant lifetime: issue order);
  // some may be gone from by_ticket_ already.
  std::deque<std::pair<absl::Time, std::string>> expiry_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::share

#endif  // GPUSTREAM_SERVER_SHARE_SHARE_TICKETS_H_
