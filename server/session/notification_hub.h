// Delivers a session's notifications to its WatchNotifications streams, and
// keeps the latest for a stream that reconnects.
#ifndef GPUSTREAM_SERVER_SESSION_NOTIFICATION_HUB_H_
#define GPUSTREAM_SERVER_SESSION_NOTIFICATION_HUB_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
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
  // receives (from the hub's replay) adds its count to that report, so
  // every notification meant for it is either delivered or counted once.
  virtual void Deliver(const v1::Notification& notification) = 0;
  // The session is gone: no more notifications will come.
  virtual void Close() = 0;
};

// Numbers every notification (Notification.id: 1, 2, ... per session, in
// publish order) and keeps the latest kMaxRetained of them, delivered or
// not, so that a stream that broke can be resumed: a sink attaching with the
// id its client acknowledged last receives every later one first, then the
// live ones. One attaching without an id receives those no sink has been
// handed (published while none was attached), as a first stream does.
//
// Bounded: while a sink is attached the oldest notification makes room for
// the newest. While none is, what no sink was handed is never evicted for
// a newer one: the newest are dropped and counted instead (a client that
// does not watch learns of the oldest it missed, and how many more). What
// a sink asks for and the hub no longer has is delivered as a
// NotificationsDropped{count} (id 0) where the missing ids were, so a
// client can fall back to its own recovery for exactly those.
//
// Memory: at most kMaxRetained notifications per session. Thread-safe.
class NotificationHub {
 public:
  static constexpr size_t kMaxRetained = 4096;

  // Numbers and delivers `notification` (its id is overwritten). A
  // NotificationsDropped published here stands for `count` ids, kept as a
  // gap.
  void Publish(v1::Notification notification);
  // Attaches a sink: first delivers what it asked for (see the class
  // comment) and the reports of what is missing from it. The sink must stay
  // valid until Detach returns or Close is called on it. Fails with
  // INVALID_ARGUMENT, attaching nothing, when `acknowledged_id` is past the
  // last id published.
  absl::Status Attach(NotificationSink* sink,
                      std::optional<uint64_t> acknowledged_id = std::nullopt);
  void Detach(NotificationSink* sink);
  // Closes every sink and refuses later ones (session teardown).
  void CloseAll();

  // The id of the latest notification published; 0 before the first.
  uint64_t last_id();

  // The notification reporting `count` dropped ones.
  static v1::Notification DroppedReport(uint64_t count);

 private:
  absl::Mutex mu_;
  std::vector<NotificationSink*> sinks_ ABSL_GUARDED_BY(mu_);
  // The latest notifications, ids ascending (with gaps where some were
  // dropped); at most kMaxRetained.
  std::deque<v1::Notification> retained_ ABSL_GUARDED_BY(mu_);
  uint64_t last_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Every id up to this one was handed to a sink (or reported dropped).
  uint64_t handed_through_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Serializes deliveries so every sink sees notifications in publish order.
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_NOTIFICATION_HUB_H_
