// Notification numbering, retention and fan-out.
#include "server/session/notification_hub.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpustream::session {

v1::Notification NotificationHub::DroppedReport(uint64_t count) {
  v1::Notification n;
  n.mutable_notifications_dropped()->set_count(count);
  return n;
}

void NotificationHub::Publish(v1::Notification notification) {
  absl::MutexLock deliver(&deliver_mu_);
  std::vector<NotificationSink*> sinks;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    if (notification.has_notifications_dropped()) {
      // Ids nobody can have: a gap, reported to whoever asks for them.
      last_id_ += notification.notifications_dropped().count();
      notification.set_id(0);
    } else {
      notification.set_id(++last_id_);
      if (retained_.size() == kMaxRetained &&
          retained_.front().id() <= handed_through_) {
        retained_.pop_front();
      }
      // Else full of what no sink was handed: this one is dropped (a gap).
      if (retained_.size() < kMaxRetained) retained_.push_back(notification);
    }
    if (sinks_.empty()) return;
    handed_through_ = last_id_;
    sinks = sinks_;
  }
  for (NotificationSink* sink : sinks) sink->Deliver(notification);
}

absl::Status NotificationHub::Attach(NotificationSink* sink,
                                     std::optional<uint64_t> acknowledged_id) {
  absl::MutexLock deliver(&deliver_mu_);
  std::vector<v1::Notification> replay;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      sink->Close();
      return absl::OkStatus();
    }
    if (acknowledged_id.has_value() && *acknowledged_id > last_id_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "acknowledged_id ", *acknowledged_id,
          " is past the session's last notification (id ", last_id_, ")"));
    }
    // Ids [next, last_id_] are owed: each retained one, and a report for
    // each run of them no longer here.
    uint64_t next = acknowledged_id.value_or(handed_through_) + 1;
    auto it = std::lower_bound(
        retained_.begin(), retained_.end(), next,
        [](const v1::Notification& n, uint64_t id) { return n.id() < id; });
    for (; it != retained_.end(); ++it) {
      if (it->id() > next) replay.push_back(DroppedReport(it->id() - next));
      replay.push_back(*it);
      next = it->id() + 1;
    }
    if (next <= last_id_) replay.push_back(DroppedReport(last_id_ - next + 1));
    sinks_.push_back(sink);
    handed_through_ = last_id_;
  }
  for (const auto& n : replay) sink->Deliver(n);
  return absl::OkStatus();
}

void NotificationHub::Detach(NotificationSink* sink) {
  absl::MutexLock deliver(&deliver_mu_);
  absl::MutexLock lock(&mu_);
  sinks_.erase(std::remove(sinks_.begin(), sinks_.end(), sink), sinks_.end());
}

void NotificationHub::CloseAll() {
  absl::MutexLock deliver(&deliver_mu_);
  std::vector<NotificationSink*> sinks;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    sinks.swap(sinks_);
    retained_.clear();
  }
  for (NotificationSink* sink : sinks) sink->Close();
}

uint64_t NotificationHub::last_id() {
  absl::MutexLock lock(&mu_);
  return last_id_;
}

}  // namespace gpustream::session
