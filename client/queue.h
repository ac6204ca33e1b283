// A queue of device work, programmed like MAX's DeviceQueue or a CUDA stream.
#ifndef GPUSTREAM_CLIENT_QUEUE_H_
#define GPUSTREAM_CLIENT_QUEUE_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/buffer.h"
#include "client/event.h"
#include "client/flag.h"
#include "client/handle.h"
#include "client/kernel_arg.h"

namespace gpustream::client {

// Enqueue methods return at once, without a round trip: the command joins
// the session's Submit stream. A command the server rejects (an unknown id,
// a wrong argument kind, an out-of-range copy) is reported, with its code
// and message, by the session's next synchronize() — of any queue, as CUDA
// reports asynchronous errors at the next synchronizing call. A failure on
// the device makes the queue's error sticky: synchronize() keeps returning
// it and later work on the queue fails with FAILED_PRECONDITION.
class Queue : public Handle {
 public:
  Queue() = default;
  // `owned`: destroy the server queue with the handle (not the default one).
  Queue(std::shared_ptr<SessionCore> core, uint64_t id, bool owned);

  // Records a new event at this point of the queue.
  Event record_event(bool enable_timing = false);
  // Moves `event` to this point of the queue.
  void record_event(const Event& event);
  // Later work waits until the event's recorded point has completed.
  void wait_for(const Event& event);
  // Later work waits for all work enqueued on `other` so far.
  void wait_for(const Queue& other);
  // Later work stalls until the flag satisfies the condition.
  void wait_for_host_value(const Flag& flag, uint64_t value,
                           WaitCondition condition = WaitCondition::kEqual);
  // The queue stores `value` into the flag when it reaches this point.
  void write_flag(const Flag& flag, uint64_t value);
  // Runs `fn` on a client thread when the queue reaches this point; later
  // work on the queue waits until it returns (as cudaLaunchHostFunc). `fn`
  // must not wait for work of this queue.
  void enqueue_host_func(std::function<void()> fn);

  void launch(absl::string_view module, absl::string_view kernel, Dim3 grid,
              Dim3 block, std::initializer_list<Arg> args,
              uint32_t shared_memory_bytes = 0);

  void write(const Buffer& dst, uint64_t offset, absl::string_view bytes);
  // Blocks until the queue has reached and run the copy.
  absl::StatusOr<std::string> read(const Buffer& src, uint64_t offset,
                                   uint64_t size);
  void copy(const Buffer& src, uint64_t src_offset, const Buffer& dst,
            uint64_t dst_offset, uint64_t size);
  // Repeats the 32-bit `value` over [offset, offset + size); size % 4 == 0.
  void fill(const Buffer& dst, uint64_t offset, uint64_t size, uint32_t value);

  template <typename T>
  void write(const Buffer& dst, const std::vector<T>& values) {
    write(dst, 0,
          absl::string_view(reinterpret_cast<const char*>(values.data()),
                            values.size() * sizeof(T)));
  }
  template <typename T>
  absl::StatusOr<std::vector<T>> read(const Buffer& src, size_t count) {
    auto bytes = read(src, 0, count * sizeof(T));
    if (!bytes.ok()) return bytes.status();
    std::vector<T> values(count);
    std::memcpy(values.data(), bytes->data(), bytes->size());
    return values;
  }

  // Blocks until all work enqueued so far has completed. Returns the first
  // pending asynchronous error of the session, else the queue's sticky
  // error. A zero timeout waits without limit.
  absl::Status synchronize(absl::Duration timeout = absl::ZeroDuration());
  // Whether the queue is idle (a round trip).
  absl::StatusOr<bool> is_idle();

 private:
  // Created on the first enqueue_host_func: the flag the queue waits on.
  Flag host_flag_;
  uint64_t host_funcs_ = 0;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_QUEUE_H_
