// A completion flag: a 64-bit value the host writes and queues wait on, or
// that a queue writes and the host waits on (CompletionFlag in MAX).
#ifndef GPUSTREAM_CLIENT_FLAG_H_
#define GPUSTREAM_CLIENT_FLAG_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/handle.h"

namespace gpustream::client {

enum class WaitCondition { kEqual, kGreaterEqual };

class Flag : public Handle {
 public:
  Flag() = default;
  Flag(std::shared_ptr<SessionCore> core, uint64_t id)
      : Handle(std::move(core), id, [](v1::Command& c, uint64_t id) {
          c.mutable_destroy_flag()->set_flag_id(id);
        }) {}

  // Stores `value` now (sent at once, after everything enqueued before).
  absl::Status signal(uint64_t value);
  // The current value (a round trip).
  absl::StatusOr<uint64_t> load();
  // Blocks until the flag satisfies the condition; returns the value seen.
  // A zero timeout waits without limit.
  absl::StatusOr<uint64_t> wait(uint64_t value,
                                WaitCondition condition = WaitCondition::kEqual,
                                absl::Duration timeout = absl::ZeroDuration());
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_FLAG_H_
