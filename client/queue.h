// A queue of device work, programmed like MAX's DeviceQueue or a CUDA stream.
#ifndef GPUSTREAM_CLIENT_QUEUE_H_
#define GPUSTREAM_CLIENT_QUEUE_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/buffer.h"
#include "client/event.h"
#include "client/flag.h"
#include "client/graph.h"
#include "client/handle.h"
#include "client/kernel_arg.h"

namespace gpustream::client {

// Enqueue methods return at once, without a round trip: the command joins
// the session's Submit stream and leaves promptly (see SessionCore). A
// command the server rejects (an unknown id, a wrong argument kind, an
// out-of-range copy) is reported by this queue's next synchronize(), with
// its code and a message naming the call (op, ids, seq): as CUDA reports
// asynchronous errors at the next synchronizing call, but never to another
// queue's caller. Rejections of commands that target no queue (creating or
// destroying events, flags, buffers) are reported by the next synchronize()
// of any queue. A failure on the device makes the queue's error sticky:
// synchronize() keeps returning it and later work on the queue fails with
// FAILED_PRECONDITION. An object of another session (or a moved-from
// handle) is caught by the client and reported the same way, never sent.
class Queue : public Handle {
 public:
  Queue() = default;
  // `owned`: destroy the server queue with the handle (not the default one).
  Queue(std::shared_ptr<SessionCore> core, uint64_t id, bool owned);
  ~Queue();  // Destroys an owned queue; see Release.
  Queue(Queue&& other) noexcept;
  Queue& operator=(Queue&& other) noexcept;

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

  // `args`: a braced list ({2.0f, x, y, n}) or any container of Arg built
  // at run time (a std::vector<Arg>). They are checked and converted
  // against the kernel's declared parameter kinds (see Arg) before
  // anything is sent; an argument that does not fit is refused at the call
  // (not sent) and reported, naming the kernel, the argument and its kind,
  // by the queue's next synchronize() or read().
  void launch(absl::string_view module, absl::string_view kernel, Dim3 grid,
              Dim3 block, absl::Span<const Arg> args,
              uint32_t shared_memory_bytes = 0);
  // The same with clusters, a cooperative grid or dynamic shared memory:
  // q.launch("samples", "block_rank_u32", {8}, {32}, {out},
  //          {.cluster = {2}});
  void launch(absl::string_view module, absl::string_view kernel, Dim3 grid,
              Dim3 block, absl::Span<const Arg> args,
              const LaunchOptions& options);

  // Copies `bytes` now (the caller may reuse them at once); a large write
  // travels as several commands of at most SessionCore::kMaxWritePiece.
  void write(const Buffer& dst, uint64_t offset, absl::string_view bytes);
  // Blocks until the queue has reached and run the copy. An earlier
  // command of this queue that was rejected is reported here instead of
  // the bytes (as synchronize() does; queue-less failures are left for the
  // next synchronize()). With a `timeout`, DEADLINE_EXCEEDED once it
  // passes: the copy stays enqueued and its bytes are dropped when they
  // come. A zero timeout waits until the queue reaches the copy (forever
  // behind a wait nobody satisfies) or the session or its stream ends.
  absl::StatusOr<std::string> read(
      const Buffer& src, uint64_t offset, uint64_t size,
      absl::Duration timeout = absl::ZeroDuration());
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

  // Graphs. Between begin_capture() and end_capture() the queue records
  // what is enqueued on it instead of running it (launches, copies, fills,
  // writes, write_flag, wait_for_host_value, and record_event/wait_for of
  // events recorded within the capture); the daemon validates it all now,
  // so a launch of the graph validates nothing. Waiting on the queue or
  // reading from it meanwhile (synchronize, read, is_idle) fails with
  // FAILED_PRECONDITION, wait_for(queue) with INVALID_ARGUMENT;
  // enqueue_host_func is refused (UNIMPLEMENTED) by this client. Errors
  // of the captured commands are reported as for any enqueue.
  // begin_capture() and end_capture() wait for the daemon's answer. A
  // refused end_capture() (quota.max_graphs) leaves the queue capturing:
  // make room (destroy a graph) and call it again.
  absl::Status begin_capture();
  absl::StatusOr<Graph> end_capture();
  // begin_capture(), `record()` (not called if that failed), end_capture():
  //   auto g = q.capture([&] { q.launch(...); q.copy(...); });
  absl::StatusOr<Graph> capture(absl::FunctionRef<void()> record);
  // Enqueues the graph's work here, as if its commands were enqueued in
  // capture order. Launches of one graph never overlap.
  void launch(const Graph& graph);

  // Blocks until all work enqueued so far has completed. Returns the first
  // pending rejection of a command on this queue (or of a queue-less
  // command), else the queue's sticky error. A zero timeout waits without
  // limit.
  absl::Status synchronize(absl::Duration timeout = absl::ZeroDuration());
  // Whether the queue is idle (a round trip).
  absl::StatusOr<bool> is_idle();

 private:
  // OK if `object` (and `also`, when given) belongs to this queue's
  // session: else INVALID_ARGUMENT (another session's: its id would name
  // an object of this one) or FAILED_PRECONDITION (not a live handle).
  absl::Status Owns(const Handle& object, absl::string_view what,
                    const Handle* also = nullptr) const;
  // Enqueues the command `fill` describes if `check` is OK; else files
  // `check` as its rejection, reported by this queue's next synchronize().
  void Send(const absl::Status& check,
            absl::FunctionRef<void(v1::Command&)> fill);

  // Files this queue's pending errors as queue-less ones and destroys an
  // owned queue, then (once the daemon has) its host-function flags.
  void Release();

  // Created on the first enqueue_host_func: the flag the queue waits on
  // (the library stores n once the n-th host function has run), and the
  // flag the queue writes n into when it reaches the n-th (how the library
  // finds host functions whose notification a broken stream lost).
  Flag host_flag_;
  Flag reached_flag_;
  uint64_t host_funcs_ = 0;
  bool capturing_ = false;  // Between begin_capture() and end_capture().
  bool owned_ = false;  // Destroyed with the handle (not the default queue).
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_QUEUE_H_
