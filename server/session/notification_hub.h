// Delivers a session's notifications to its WatchNotifications streams.
#ifndef GPUSTREAM_SERVER_SESSION_NOTIFICATION_HUB_H_
#define GPUSTREAM_SERVER_SESSION_NOTIFICATION_HUB_H_

#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/gpustream/v1/gpustream.pb.h"

namespace gpustream::session {

// A receiver of notifications, e.g. a server-streaming RPC.
class NotificationSink {
 public:
  virtual ~NotificationSink() = default;
  // Must not block; called with no hub lock held.
  virtual void Deliver(const v1::Notification& notification) = 0;
  // The session is gone: no more notifications will come.
  virtual void Close() = 0;
};

// Notifications published while no sink is attached are kept (up to
// kMaxBacklog, oldest dropped first) and handed to the next sink. Thread-safe.
class NotificationHub {
 public:
  static constexpr size_t kMaxBacklog = 4096;

  void Publish(const v1::Notification& notification);
  // Attaches a sink, first delivering the backlog to it. The sink must stay
  // valid until Detach returns or Close is called on it.
  void Attach(NotificationSink* sink);
  void Detach(NotificationSink* sink);
  // Closes every sink and refuses later ones (session teardown).
  void CloseAll();

 private:
  absl::Mutex mu_;
  std::vector<NotificationSink*> sinks_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::Notification> backlog_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Serializes deliveries so every sink sees notifications in publish order.
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_NOTIFICATION_HUB_H_
