// Delivers a session's notifications to its WatchNotifications streams.
#ifndef GPUSTREAM_SERVER_SESSION_NOTIFICATION_HUB_H_
#define GPUSTREAM_SERVER_SESSION_NOTIFICATION_HUB_H_

#include <cstdint>
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
  // Must not block; called with no hub lock held, one call at a time. A
  // sink that bounds what it holds drops the newest notifications past its
  // bound and reports them with a NotificationsDropped of its own; one it
  // receives (from the hub's backlog) adds its count to that report, so
  // every published notification is either delivered or counted once.
  virtual void Deliver(const v1::Notification& notification) = 0;
  // The session is gone: no more notifications will come.
  virtual void Close() = 0;
};

// Notifications published while no sink is attached wait in a backlog for
// the next sink. The backlog is bounded: it keeps the oldest kMaxBacklog
// notifications and counts (never silently loses) the newer ones, which are
// dropped. The sink that attaches next receives the backlog and then, if any
// were dropped, one NotificationsDropped{count} marking where they were, so
// a client that does not watch learns what it missed. With a sink attached
// nothing is kept here: each sink bounds its own queue.
//
// Memory: at most kMaxBacklog notifications per session. Thread-safe.
class NotificationHub {
 public:
  static constexpr size_t kMaxBacklog = 4096;

  void Publish(const v1::Notification& notification);
  // Attaches a sink, first delivering the backlog (and the drop report) to
  // it. The sink must stay valid until Detach returns or Close is called on
  // it.
  void Attach(NotificationSink* sink);
  void Detach(NotificationSink* sink);
  // Closes every sink and refuses later ones (session teardown).
  void CloseAll();

  // The notification reporting `count` dropped ones.
  static v1::Notification DroppedReport(uint64_t count);

 private:
  absl::Mutex mu_;
  std::vector<NotificationSink*> sinks_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::Notification> backlog_ ABSL_GUARDED_BY(mu_);
  // Published after the backlog filled, not yet reported to a sink.
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Serializes deliveries so every sink sees notifications in publish order.
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_NOTIFICATION_HUB_H_
