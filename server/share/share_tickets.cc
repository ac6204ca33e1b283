// Share tickets: issue, redeem once, revoke, expire.
#include "server/share/share_tickets.h"

#include <sys/random.h>
#include <unistd.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gpustream::share {

absl::StatusOr<std::string> ShareTickets::Issue(
    const std::string& session_id,
    std::weak_ptr<const backend::SharedRegion> region) {
  std::string ticket(kTicketBytes, '\0');
  size_t got = 0;
  for (int tries = 0; got < ticket.size(); ++tries) {
    const ssize_t n = getrandom(ticket.data() + got, ticket.size() - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (tries > 100) {
      return absl::InternalError("getrandom failed: no share ticket");
    }
  }
  const backend::SharedRegion* key = region.lock().get();
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(now);
  if (by_ticket_.size() >= kMaxTickets) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kind MEMORY_KIND_HOST_SHARED: the daemon holds ", kMaxTickets,
        " share tickets not yet redeemed (of all sessions); try again once "
        "they are fetched or expire (30 s)"));
  }
  absl::flat_hash_set<std::string>& mine = by_session_[session_id];
  if (mine.size() >= kMaxTicketsPerSession) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kind MEMORY_KIND_HOST_SHARED: the session holds ",
        kMaxTicketsPerSession,
        " share tickets not yet redeemed; fetch (or free) those buffers "
        "first"));
  }
  mine.insert(ticket);
  by_region_[key] = ticket;
  by_ticket_[ticket] =
      Entry{session_id, std::move(region), key, now + lifetime_};
  expiry_.emplace_back(now + lifetime_, ticket);
  return ticket;
}

absl::StatusOr<ShareTickets::Redeemed> ShareTickets::Redeem(
    absl::string_view session_id, absl::string_view ticket) {
  Entry entry;
  {
    absl::MutexLock lock(&mu_);
    DropExpiredLocked(absl::Now());
    auto it = by_ticket_.find(ticket);
    if (it == by_ticket_.end()) {
      return absl::NotFoundError("unknown, used or expired ticket");
    }
    entry = EraseLocked(it);
  }
  absl::Status refused;
  if (entry.session_id != session_id) {
    refused = absl::NotFoundError("ticket presented for another session");
  } else if (absl::Now() >= entry.expires) {
    refused = absl::NotFoundError("ticket expired");
  }
  std::shared_ptr<const backend::SharedRegion> region = entry.region.lock();
  if (region == nullptr) return absl::NotFoundError("buffer already freed");
  if (!refused.ok()) {
    Discard(entry);
    return refused;
  }
  const int fd = region->TakeFd();
  if (fd < 0) return absl::NotFoundError("buffer already shared");
  return Redeemed{region->size(), fd};
}

void ShareTickets::Revoke(const backend::SharedRegion* region) {
  Entry entry;
  {
    absl::MutexLock lock(&mu_);
    auto found = by_region_.find(region);
    if (found == by_region_.end()) return;
    auto it = by_ticket_.find(found->second);
    if (it == by_ticket_.end()) return;
    entry = EraseLocked(it);
  }
  Discard(entry);
}

void ShareTickets::Forget(const std::string& session_id) {
  std::vector<Entry> dropped;
  {
    absl::MutexLock lock(&mu_);
    auto mine = by_session_.find(session_id);
    if (mine == by_session_.end()) return;
    // Taken out first: EraseLocked edits the session's set.
    const absl::flat_hash_set<std::string> tickets = std::move(mine->second);
    by_session_.erase(mine);
    for (const std::string& ticket : tickets) {
      auto it = by_ticket_.find(ticket);
      if (it != by_ticket_.end()) dropped.push_back(EraseLocked(it));
    }
  }
  for (const Entry& entry : dropped) Discard(entry);
}

void ShareTickets::DropExpired() {
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(absl::Now());
}

size_t ShareTickets::outstanding() const {
  absl::MutexLock lock(&mu_);
  return by_ticket_.size();
}

ShareTickets::Entry ShareTickets::EraseLocked(
    absl::flat_hash_map<std::string, Entry>::iterator it) {
  Entry entry = std::move(it->second);
  auto mine = by_session_.find(entry.session_id);
  if (mine != by_session_.end()) {
    mine->second.erase(it->first);
    if (mine->second.empty()) by_session_.erase(mine);
  }
  auto region = by_region_.find(entry.key);
  if (region != by_region_.end() && region->second == it->first) {
    by_region_.erase(region);
  }
  by_ticket_.erase(it);
  return entry;
}

void ShareTickets::DropExpiredLocked(absl::Time now) {
  while (!expiry_.empty() && expiry_.front().first <= now) {
    auto it = by_ticket_.find(expiry_.front().second);
    if (it != by_ticket_.end() && it->second.expires <= now) {
      // close(2) under the lock: it does not block on a memfd.
      Discard(EraseLocked(it));
    }
    expiry_.pop_front();
  }
  // Tickets used before they expired leave entries here; bound them.
  if (expiry_.size() > 2 * by_ticket_.size() + 1024) {
    std::deque<std::pair<absl::Time, std::string>> kept;
    for (auto& e : expiry_) {
      if (by_ticket_.contains(e.second)) kept.push_back(std::move(e));
    }
    expiry_.swap(kept);
  }
}

void ShareTickets::Discard(const Entry& entry) {
  if (auto region = entry.region.lock(); region != nullptr) {
    if (const int fd = region->TakeFd(); fd >= 0) close(fd);
  }
}

}  // namespace gpustream::share
