// Event operations.
#include "client/event.h"

#include "client/wire.h"

namespace gpustream::client {

absl::Status Event::synchronize(absl::Duration timeout) {
  return core()
      .Call(
          [&](v1::Command& c) {
            auto* sync = c.mutable_synchronize_event();
            sync->set_event_id(id());
            sync->set_timeout_ms(TimeoutMs(timeout));
          },
          SessionCore::Answer::kResult, ClientWait(timeout))
      .status();
}

absl::StatusOr<bool> Event::is_complete() {
  auto result = core().Call(
      [&](v1::Command& c) { c.mutable_query_event()->set_event_id(id()); });
  if (!result.ok()) return result.status();
  return result->query_event().complete();
}

absl::StatusOr<float> Event::elapsed_ms_since(const Event& start) {
  auto result = core().Call([&](v1::Command& c) {
    auto* elapsed = c.mutable_event_elapsed_time();
    elapsed->set_start_event_id(start.id());
    elapsed->set_end_event_id(id());
  });
  if (!result.ok()) return result.status();
  return result->event_elapsed_time().milliseconds();
}

}  // namespace gpustream::client
