// Helpers for tests of GPU devices on any vendor's fake driver.
#ifndef GPUSTREAM_SERVER_BACKEND_GPU_GPU_TESTING_H_
#define GPUSTREAM_SERVER_BACKEND_GPU_GPU_TESTING_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/backend/buffer.h"
#include "server/backend/queue.h"

namespace gpustream::backend {

// The first 8 bytes of `buffer` as `queue` reads them, after the work
// enqueued on it before: the read's error, or DEADLINE_EXCEEDED when it
// has not completed within `timeout`.
inline absl::StatusOr<uint64_t> ReadU64(
    Queue& queue, std::shared_ptr<Buffer> buffer,
    absl::Duration timeout = absl::Seconds(10)) {
  struct Result {
    absl::Notification done;
    absl::StatusOr<std::string> data;
  };
  auto result = std::make_shared<Result>();
  if (absl::Status s = queue.Read(std::move(buffer), 0, 8,
                                  [result](absl::StatusOr<std::string> data) {
                                    result->data = std::move(data);
                                    result->done.Notify();
                                  });
      !s.ok()) {
    return s;
  }
  if (!result->done.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError("the read did not complete");
  }
  if (!result->data.ok()) return result->data.status();
  if (result->data->size() != 8) {
    return absl::InternalError(
        absl::StrCat("read ", result->data->size(), " bytes, not 8"));
  }
  uint64_t value = 0;
  std::memcpy(&value, result->data->data(), 8);
  return value;
}

// Holds a device's dispatcher (its one thread: completions, deliveries,
// failures) in a host function of `queue`, to keep a moment open, until
// Release() or destruction. Declare it after the device and its queues:
// it lets go before they go. The host function shares its state, so it
// may still be waking when the hold is destroyed.
class DispatcherHold {
 public:
  explicit DispatcherHold(Queue& queue) : state_(std::make_shared<State>()) {
    posted_ = queue
                  .HostFunc([state = state_] {
                    state->held.Notify();
                    state->release.WaitForNotification();
                  })
                  .ok();
  }
  ~DispatcherHold() { Release(); }
  DispatcherHold(const DispatcherHold&) = delete;
  DispatcherHold& operator=(const DispatcherHold&) = delete;

  // Whether the dispatcher is held within `timeout`.
  bool Held(absl::Duration timeout = absl::Seconds(20)) {
    return posted_ && state_->held.WaitForNotificationWithTimeout(timeout);
  }
  void Release() {
    if (!state_->release.HasBeenNotified()) state_->release.Notify();
  }

 private:
  struct State {
    absl::Notification held, release;
  };
  std::shared_ptr<State> state_;
  bool posted_ = false;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_GPU_GPU_TESTING_H_
