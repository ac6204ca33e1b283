// Tickets that trade for a shared buffer's memory on the share socket.
#ifndef GPUSTREAM_SERVER_SHARE_SHARE_TICKETS_H_
#define GPUSTREAM_SERVER_SHARE_SHARE_TICKETS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/shared_region.h"

namespace gpustream::share {

// Bytes of a ticket: 128 random bits from the kernel's CSPRNG.
inline constexpr size_t kTicketBytes = 16;
// Tickets one session, and the whole daemon, may hold unredeemed: each
// keeps a descriptor open in the daemon until it is redeemed, revoked or
// expires, and descriptors are what the daemon's listeners need too.
inline constexpr size_t kMaxTicketsPerSession = 64;
inline constexpr size_t kMaxTickets = 1024;

// Every ticket AllocateBuffer(HOST_SHARED) issued and nobody presented yet.
// A ticket is single use, valid for `lifetime` after it was issued, and
// bound to the session that allocated the buffer. It does not hold the
// memory: once the buffer is gone the ticket gets nothing. A ticket that
// leaves the store unredeemed (presented wrongly, expired, revoked when its
// buffer is freed, forgotten when its session closes) closes its region's
// memfd: that buffer can no longer be shared, and the daemon holds no
// descriptor for it. Expired tickets are dropped as others are issued or
// presented. Thread-safe.
class ShareTickets {
 public:
  explicit ShareTickets(absl::Duration lifetime = absl::Seconds(30))
      : lifetime_(lifetime) {}

  // A new ticket (kTicketBytes raw bytes) for `region`. RESOURCE_EXHAUSTED
  // when the session holds kMaxTicketsPerSession unredeemed ones.
  absl::StatusOr<std::string> Issue(
      const std::string& session_id,
      std::weak_ptr<const backend::SharedRegion> region);

  // What a redeemed ticket gives: the buffer's size and its memfd, which
  // the caller now owns (and closes).
  struct Redeemed {
    uint64_t size = 0;
    int fd = -1;
  };
  // The memfd of the region `ticket` was issued for, if `session_id` is its
  // session, it has not expired and the region still lives; else NOT_FOUND
  // saying which of these failed (for the daemon's log only: the peer
  // learns nothing). A presented ticket is used up whatever the answer.
  absl::StatusOr<Redeemed> Redeem(absl::string_view session_id,
                                  absl::string_view ticket);

  // Drops the ticket of a buffer being freed, if it is still outstanding.
  void Revoke(const backend::SharedRegion* region);
  // Drops the tickets of a session that closed.
  void Forget(const std::string& session_id);
  // Drops expired tickets (closing their descriptors); the share server
  // calls it every second.
  void DropExpired();

  // Tickets issued and neither presented nor dropped yet.
  size_t outstanding() const;

  // Where tickets are redeemed: the share socket's path, empty while
  // sharing is off (HOST_SHARED allocations are then refused). Set once,
  // before the daemon serves; StopServing (the share socket closed at
  // shutdown) turns sharing off for good.
  void set_socket_path(std::string path) {
    socket_path_ = std::move(path);
    serving_.store(!socket_path_.empty());
  }
  void StopServing() { serving_.store(false); }
  std::string socket_path() const {
    return serving_.load() ? socket_path_ : std::string();
  }

 private:
  struct Entry {
    std::string session_id;
    std::weak_ptr<const backend::SharedRegion> region;
    const backend::SharedRegion* key;  // Identity only (by_region_).
    absl::Time expires;
  };
  // Removes `ticket`'s entry from every index and returns it.
  Entry EraseLocked(absl::flat_hash_map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the memfd of an entry that leaves unredeemed.
  static void Discard(const Entry& entry);

  const absl::Duration lifetime_;
  std::string socket_path_;  // Written before serving only.
  std::atomic<bool> serving_{false};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> by_ticket_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>> by_session_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const backend::SharedRegion*, std::string> by_region_
      ABSL_GUARDED_BY(mu_);
  // Tickets in the order they expire (a constant lifetime: issue order);
  // some may be gone from by_ticket_ already.
  std::deque<std::pair<absl::Time, std::string>> expiry_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpustream::share

#endif  // GPUSTREAM_SERVER_SHARE_SHARE_TICKETS_H_
