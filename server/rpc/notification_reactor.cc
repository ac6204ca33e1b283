// WatchNotifications stream handling.
#include "server/rpc/notification_reactor.h"

#include <utility>

#include "server/rpc/status_util.h"

namespace gpustream::rpc {

NotificationReactor::NotificationReactor(
    std::shared_ptr<session::Session> session,
    std::optional<uint64_t> acknowledged_id, metrics::Metrics* metrics)
    : session_(std::move(session)), metrics_(metrics) {
  if (metrics_ != nullptr) metrics_->NotificationStreamOpened();
  session_->StreamOpened();
  // Attach publishes this reactor to the hub's threads under the hub's
  // mutex.
  const absl::Status attached =
      session_->notifications().Attach(this, acknowledged_id);
  // Every reaction takes mu_ first: this publishes the members set above to
  // it, whichever gRPC thread runs it (TSan cannot see gRPC's own order).
  absl::MutexLock lock(&mu_);
  if (!attached.ok()) {
    finished_ = true;
    Finish(ToGrpcStatus(attached));
  }
}

void NotificationReactor::Deliver(const v1::Notification& notification) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return;  // Nobody will read it.
  if (notification.has_notifications_dropped()) {
    // The hub's report joins ours: one report per gap.
    dropped_ += notification.notifications_dropped().count();
  } else {
    MaybeQueueDropReport();  // Earlier drops are reported before this one.
    if (dropped_ == 0 && queue_.size() < kMaxQueued) {
      queue_.push_back(notification);
    } else {
      ++dropped_;
    }
  }
  MaybeQueueDropReport();
  MaybeWriteOrFinish();
}

void NotificationReactor::Close() {
  absl::MutexLock lock(&mu_);
  closing_ = true;
  MaybeWriteOrFinish();
}

void NotificationReactor::MaybeQueueDropReport() {
  if (dropped_ > 0 && queue_.size() < kMaxQueued) {
    queue_.push_back(session::NotificationHub::DroppedReport(dropped_));
    dropped_ = 0;
  }
}

void NotificationReactor::MaybeWriteOrFinish() {
  if (writing_ || finished_) return;
  if (!queue_.empty() && !cancelled_) {
    writing_ = true;
    StartWrite(&queue_.front());
  } else if (cancelled_ || (closing_ && dropped_ == 0)) {
    // A pending drop report is still written before a clean close.
    finished_ = true;
    queue_.clear();
    Finish(grpc::Status::OK);
  }
}

void NotificationReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  queue_.pop_front();
  if (!ok) cancelled_ = true;
  MaybeQueueDropReport();
  MaybeWriteOrFinish();
}

void NotificationReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  MaybeWriteOrFinish();
}

void NotificationReactor::OnDone() {
  {
    // gRPC runs OnDone after every other reaction, but orders them through
    // its own uninstrumented machinery: taking mu_ shows ThreadSanitizer
    // that the last OnWriteDone's use of queue_ ends before it is freed.
    absl::MutexLock lock(&mu_);
    queue_.clear();
  }
  // After Detach returns the hub never calls this sink again.
  session_->notifications().Detach(this);
  session_->StreamClosed();
  if (metrics_ != nullptr) metrics_->NotificationStreamClosed();
  delete this;
}

}  // namespace gpustream::rpc
