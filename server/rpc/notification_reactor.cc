// WatchNotifications stream handling.
#include "server/rpc/notification_reactor.h"

namespace gpustream::rpc {

NotificationReactor::NotificationReactor(
    std::shared_ptr<session::Session> session)
    : session_(std::move(session)) {
  session_->StreamOpened();
  session_->notifications().Attach(this);
}

void NotificationReactor::Deliver(const v1::Notification& notification) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(notification);
  MaybeWriteOrFinish();
}

void NotificationReactor::Close() {
  absl::MutexLock lock(&mu_);
  closing_ = true;
  MaybeWriteOrFinish();
}

void NotificationReactor::MaybeWriteOrFinish() {
  if (writing_ || finished_) return;
  if (!queue_.empty() && !cancelled_) {
    writing_ = true;
    StartWrite(&queue_.front());
  } else if (closing_ || cancelled_) {
    finished_ = true;
    Finish(grpc::Status::OK);
  }
}

void NotificationReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  queue_.pop_front();
  if (!ok) cancelled_ = true;
  MaybeWriteOrFinish();
}

void NotificationReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  MaybeWriteOrFinish();
}

void NotificationReactor::OnDone() {
  // After Detach returns the hub never calls this sink again.
  session_->notifications().Detach(this);
  session_->StreamClosed();
  delete this;
}

}  // namespace gpustream::rpc
