// Share tickets: issue, redeem once, expire.
#include "server/share/share_tickets.h"

#include <sys/random.h>

#include "absl/status/status.h"
#include "absl/time/clock.h"

namespace gpustream::share {

std::string ShareTickets::Issue(
    const std::string& session_id,
    std::weak_ptr<const backend::SharedRegion> region) {
  std::string ticket(kTicketBytes, '\0');
  size_t got = 0;
  while (got < ticket.size()) {
    const ssize_t n = getrandom(ticket.data() + got, ticket.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(now);
  by_ticket_[ticket] = Entry{session_id, std::move(region), now + lifetime_};
  expiry_.emplace_back(now + lifetime_, ticket);
  return ticket;
}

absl::StatusOr<std::shared_ptr<const backend::SharedRegion>>
ShareTickets::Redeem(absl::string_view session_id, absl::string_view ticket) {
  Entry entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = by_ticket_.find(ticket);
    if (it == by_ticket_.end()) {
      return absl::NotFoundError("unknown, used or expired ticket");
    }
    entry = std::move(it->second);
    by_ticket_.erase(it);
  }
  if (entry.session_id != session_id) {
    return absl::NotFoundError("ticket presented for another session");
  }
  if (absl::Now() >= entry.expires) {
    return absl::NotFoundError("ticket expired");
  }
  std::shared_ptr<const backend::SharedRegion> region = entry.region.lock();
  if (region == nullptr) return absl::NotFoundError("buffer already freed");
  return region;
}

void ShareTickets::Forget(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(by_ticket_, [&](const auto& kv) {
    return kv.second.session_id == session_id;
  });
  DropExpiredLocked(absl::Now());
}

size_t ShareTickets::outstanding() const {
  absl::MutexLock lock(&mu_);
  return by_ticket_.size();
}

void ShareTickets::DropExpiredLocked(absl::Time now) {
  while (!expiry_.empty() && expiry_.front().first <= now) {
    auto it = by_ticket_.find(expiry_.front().second);
    if (it != by_ticket_.end() && it->second.expires <= now) {
      by_ticket_.erase(it);
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

}  // namespace gpustream::share
