// Notification fan-out.
#include "server/session/notification_hub.h"

#include <algorithm>

namespace gpustream::session {

void NotificationHub::Publish(const v1::Notification& notification) {
  absl::MutexLock deliver(&deliver_mu_);
  std::vector<NotificationSink*> sinks;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    if (sinks_.empty()) {
      if (backlog_.size() == kMaxBacklog) backlog_.pop_front();
      backlog_.push_back(notification);
      return;
    }
    sinks = sinks_;
  }
  for (NotificationSink* sink : sinks) sink->Deliver(notification);
}

void NotificationHub::Attach(NotificationSink* sink) {
  absl::MutexLock deliver(&deliver_mu_);
  std::deque<v1::Notification> backlog;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      sink->Close();
      return;
    }
    sinks_.push_back(sink);
    backlog.swap(backlog_);
  }
  for (const auto& n : backlog) sink->Deliver(n);
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
  }
  for (NotificationSink* sink : sinks) sink->Close();
}

}  // namespace gpustream::session
