// The server side of one WatchNotifications stream.
#ifndef GPUSTREAM_SERVER_RPC_NOTIFICATION_REACTOR_H_
#define GPUSTREAM_SERVER_RPC_NOTIFICATION_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/session/notification_hub.h"
#include "server/session/session.h"

namespace gpustream::rpc {

// Attached to its session's hub for the stream's life; writes one
// notification at a time, in publish order. Finishes when the session is
// torn down or the client cancels; deletes itself in OnDone.
//
// Bounded: a client that does not read its stream (gRPC flow control stalls
// the writes) makes the send queue fill up to kMaxQueued notifications, the
// one being written included. Newer ones are then dropped and counted, and
// once a write frees space a NotificationsDropped{count} is queued where
// they would have been, before any newer notification: what the client
// reads is every notification published, in order, except runs replaced by
// their count.
class NotificationReactor : public grpc::ServerWriteReactor<v1::Notification>,
                            public session::NotificationSink {
 public:
  // Room for a whole replay: all the hub keeps, and a drop report before
  // each of them and after the last (a replay's gaps), so a stream that
  // resumes drops nothing of it.
  static constexpr size_t kMaxQueued =
      2 * session::NotificationHub::kMaxRetained + 1;

  // Attaches to the session's hub with `acknowledged_id`
  // (WatchNotificationsRequest; NotificationHub::Attach says what it
  // replays), or finishes with the hub's refusal of it. `metrics` (may be
  // null) counts open streams; it must outlive the stream.
  NotificationReactor(std::shared_ptr<session::Session> session,
                      std::optional<uint64_t> acknowledged_id,
                      metrics::Metrics* metrics);

  void Deliver(const v1::Notification& notification) override;
  void Close() override;

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Queues the drop report if there are drops to report and room for it.
  void MaybeQueueDropReport() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeWriteOrFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<session::Session> session_;
  metrics::Metrics* const metrics_;
  absl::Mutex mu_;
  // The front is being written while writing_.
  std::deque<v1::Notification> queue_ ABSL_GUARDED_BY(mu_);
  // Dropped for want of room and not yet reported.
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;    // Finish once drained.
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // Finish, drop the rest.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_NOTIFICATION_REACTOR_H_
