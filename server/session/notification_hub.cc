// Notification fan-out.
#include "server/session/notification_hub.h"

#include <algorithm>
#include <utility>

namespace gpustream::session {

v1::Notification NotificationHub::DroppedReport(uint64_t count) {
  v1::Notification n;
  n.mutable_notifications_dropped()->set_count(count);
  return n;
}

void NotificationHub::Publish(const v1::Notification& notification) {
  absl::MutexLock deliver(&deliver_mu_);
  std::vector<NotificationSink*> sinks;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    if (sinks_.empty()) {
      // Tail drop: what is kept stays in order, and the one report that
      // follows it covers exactly the gap.
      if (backlog_.size() < kMaxBacklog) {
        backlog_.push_back(notification);
      } else if (notification.has_notifications_dropped()) {
        dropped_ += notification.notifications_dropped().count();
      } else {
        ++dropped_;
      }
      return;
    }
    sinks = sinks_;
  }
  for (NotificationSink* sink : sinks) sink->Deliver(notification);
}

void NotificationHub::Attach(NotificationSink* sink) {
  absl::MutexLock deliver(&deliver_mu_);
  std::deque<v1::Notification> backlog;
  uint64_t dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      sink->Close();
      return;
    }
    sinks_.push_back(sink);
    backlog.swap(backlog_);
    dropped = std::exchange(dropped_, 0);
  }
  for (const auto& n : backlog) sink->Deliver(n);
  if (dropped > 0) sink->Deliver(DroppedReport(dropped));
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
    backlog_.clear();
    dropped_ = 0;
  }
  for (NotificationSink* sink : sinks) sink->Close();
}

}  // namespace gpustream::session
