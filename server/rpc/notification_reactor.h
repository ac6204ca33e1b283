// The server side of one WatchNotifications stream.
#ifndef GPUSTREAM_SERVER_RPC_NOTIFICATION_REACTOR_H_
#define GPUSTREAM_SERVER_RPC_NOTIFICATION_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"
#include "server/session/notification_hub.h"
#include "server/session/session.h"

namespace gpustream::rpc {

// Attached to its session's hub for the stream's life; writes one
// notification at a time, in publish order. Finishes when the session is
// torn down or the client cancels; deletes itself in OnDone.
class NotificationReactor : public grpc::ServerWriteReactor<v1::Notification>,
                            public session::NotificationSink {
 public:
  explicit NotificationReactor(std::shared_ptr<session::Session> session);

  void Deliver(const v1::Notification& notification) override;
  void Close() override;

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void MaybeWriteOrFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<session::Session> session_;
  absl::Mutex mu_;
  std::deque<v1::Notification> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;    // Finish once drained.
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // Finish, drop the rest.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpustream::rpc

#endif  // GPUSTREAM_SERVER_RPC_NOTIFICATION_REACTOR_H_
