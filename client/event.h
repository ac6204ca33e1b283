// An event: a recorded point in a queue's work (DeviceEvent in MAX).
#ifndef GPUSTREAM_CLIENT_EVENT_H_
#define GPUSTREAM_CLIENT_EVENT_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/handle.h"

namespace gpustream::client {

class Event : public Handle {
 public:
  Event() = default;
  Event(std::shared_ptr<SessionCore> core, uint64_t id)
      : Handle(std::move(core), id, [](v1::Command& c, uint64_t id) {
          c.mutable_destroy_event()->set_event_id(id);
        }) {}

  // Blocks until the last recorded point has completed.
  absl::Status synchronize(absl::Duration timeout = absl::ZeroDuration());
  // Whether it has completed (a round trip).
  absl::StatusOr<bool> is_complete();
  // Milliseconds from `start` to this event; both need enable_timing.
  absl::StatusOr<float> elapsed_ms_since(const Event& start);
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_EVENT_H_
