// Test helper: a NotificationSink that keeps the first notification of one
// kind.
#ifndef GPUSTREAM_SERVER_SESSION_RECORDING_SINK_H_
#define GPUSTREAM_SERVER_SESSION_RECORDING_SINK_H_

#include "absl/synchronization/notification.h"
#include "proto/gpustream/v1/gpustream.pb.h"
#include "server/session/notification_hub.h"

namespace gpustream::session {

// The hub serializes Deliver and Close, and `got`/`closed` publish `first`
// to the test thread.
class RecordingSink : public NotificationSink {
 public:
  explicit RecordingSink(v1::Notification::KindCase kind) : kind_(kind) {}

  void Deliver(const v1::Notification& n) override {
    if (n.kind_case() == kind_ && !got.HasBeenNotified()) {
      first = n;
      got.Notify();
    }
  }
  void Close() override { closed.Notify(); }

  v1::Notification first;
  absl::Notification got, closed;

 private:
  const v1::Notification::KindCase kind_;
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_RECORDING_SINK_H_
