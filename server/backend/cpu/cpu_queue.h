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

// Enqueueing appends to a deque and never blocks; the worker drains it.
// The CpuDevice destroys queues on its cleanup thread (never the worker).
class CpuQueue : public Queue {
 public:
  explicit CpuQueue(absl::AnyInvocable<void(const absl::Status&)> on_error);
  // Waits for enqueued work to finish, then joins the worker.
  ~CpuQueue() override;
  CpuQueue(const CpuQueue&) = delete;
  CpuQueue& operator=(const CpuQueue&) = delete;

  absl::Status Launch(const Kernel& kernel, const LaunchConfig& config,
                      std::vector<KernelArg> args) override;
  absl::Status Write(std::shared_ptr<Buffer> dst, uint64_t offset,
                     std::string data) override;
  absl::Status Read(std::shared_ptr<Buffer> src, uint64_t offset, uint64_t size,
                    ReadDone done) override;
  absl::Status Copy(std::shared_ptr<Buffer> src, uint64_t src_offset,
                    std::shared_ptr<Buffer> dst, uint64_t dst_offset,
                    uint64_t size) override;
  absl::Status Fill(std::shared_ptr<Buffer> dst, uint64_t offset, uint64_t size,
                    uint32_t value) override;
  absl::Status RecordEvent(std::shared_ptr<Event> event) override;
  absl::Status WaitEvent(std::shared_ptr<Event> event) override;
  absl::Status WaitQueue(Queue& other) override;
  absl::Status WaitFlag(std::shared_ptr<Flag> flag, uint64_t value,
                        WaitCondition condition) override;
  absl::Status WriteFlag(std::shared_ptr<Flag> flag, uint64_t value) override;
  absl::Status HostFunc(absl::AnyInvocable<void()> fn) override;
  void OnIdle(Done done) override;
  void Cancel(const absl::Status& reason) override;
  bool IsIdle() override;
  absl::Status error() override;

 private:
  // One unit of work. It receives the queue's sticky error (OK if none);
  // device work and waits skip themselves when that is set. A non-OK return
  // becomes the sticky error if there was none.
  using Op = absl::AnyInvocable<absl::Status(const absl::Status& sticky)>;

  struct State {
    absl::Mutex mu;
    std::deque<Op> ops ABSL_GUARDED_BY(mu);
    bool stopping ABSL_GUARDED_BY(mu) = false;
    absl::Status error ABSL_GUARDED_BY(mu);
    // Set by Cancel, read by the worker between operations without the lock.
    std::atomic<bool> cancelled{false};
    // Enqueued and not yet finished; read without the lock by IsIdle.
    std::atomic<uint64_t> pending{0};
    absl::AnyInvocable<void(const absl::Status&)> on_error;
  };

  static void Work(State* state);
  absl::Status Enqueue(Op op);

  std::unique_ptr<State> state_;
  std::thread worker_;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_CPU_CPU_QUEUE_H_
