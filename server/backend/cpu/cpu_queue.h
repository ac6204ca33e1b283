// A CPU queue: one worker thread runs the queue's work in order.
#ifndef GPUSTREAM_SERVER_BACKEND_CPU_CPU_QUEUE_H_
#define GPUSTREAM_SERVER_BACKEND_CPU_CPU_QUEUE_H_

#include <atomic>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/queue.h"

namespace gpustream::backend {

class CpuQueue : public Queue {
 public:
  explicit CpuQueue(absl::AnyInvocable<void(const absl::Status&)> on_error);
  // Waits for enqueued work to finish. May run on the worker itself (the
  // last reference dropped by a callback): then the worker finishes alone.
  ~CpuQueue() override;
  CpuQueue(const CpuQueue&) = delete;
  CpuQueue& operator=(const CpuQueue&) = delete;

  void Launch(const Kernel& kernel, const LaunchConfig& config,
              std::vector<KernelArg> args) override;
  void Write(std::shared_ptr<Buffer> dst, uint64_t offset,
             std::string data) override;
  void Read(
      std::shared_ptr<Buffer> src, uint64_t offset, uint64_t size,
      absl::AnyInvocable<void(absl::StatusOr<std::string>)> done) override;
  void Copy(std::shared_ptr<Buffer> src, uint64_t src_offset,
            std::shared_ptr<Buffer> dst, uint64_t dst_offset,
            uint64_t size) override;
  void Fill(std::shared_ptr<Buffer> dst, uint64_t offset, uint64_t size,
            uint32_t value) override;
  void RecordEvent(std::shared_ptr<Event> event) override;
  void WaitEvent(std::shared_ptr<Event> event) override;
  void WaitQueue(Queue& other) override;
  void WaitFlag(std::shared_ptr<Flag> flag, uint64_t value,
                WaitCondition condition) override;
  void WriteFlag(std::shared_ptr<Flag> flag, uint64_t value) override;
  void HostFunc(absl::AnyInvocable<void()> fn) override;
  void OnIdle(Done done) override;
  bool IsIdle() override;
  absl::Status error() override;

 private:
  // One unit of work. It receives the queue's sticky error (OK if none);
  // device work skips itself when that is set. A non-OK return becomes the
  // sticky error if there was none.
  using Op = absl::AnyInvocable<absl::Status(const absl::Status& sticky)>;

  // Shared with the worker thread, which may outlive the CpuQueue object.
  struct State {
    absl::Mutex mu;
    std::deque<Op> ops ABSL_GUARDED_BY(mu);
    bool stopping ABSL_GUARDED_BY(mu) = false;
    absl::Status error ABSL_GUARDED_BY(mu);
    // Enqueued and not yet finished; read without the lock by IsIdle.
    std::atomic<uint64_t> pending{0};
    absl::AnyInvocable<void(const absl::Status&)> on_error;
  };

  static void Work(std::shared_ptr<State> state);
  void Enqueue(Op op);

  std::shared_ptr<State> state_;
  std::thread worker_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_QUEUE_H_
