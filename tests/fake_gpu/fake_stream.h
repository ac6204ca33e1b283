// Streams of the emulated GPU: an in-order queue of operations run by
// one worker thread per stream, as a GPU runs a stream's work.
#ifndef TESTS_FAKE_GPU_FAKE_STREAM_H_
#define TESTS_FAKE_GPU_FAKE_STREAM_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "tests/fake_gpu/fake_context.h"
#include "tests/fake_gpu/fake_gpu.h"

namespace fakegpu {

class Stream;

// One unit of stream work, run on the stream's worker once everything
// enqueued before it has completed. Returns Result::kSuccess, or the error that
// faults the context (Result::kIllegalAddress, ...). An operation that
// waits must return early (Result::kSuccess) once stream.Interrupted().
using Op = std::function<Result(Stream& stream)>;

// One hardware queue (CUDA_DEVICE_MAX_CONNECTIONS): the work of every
// stream mapped onto it starts in the order it was enqueued, so an
// operation that does not finish (an unsatisfied StreamWaitValue64, an
// event wait, a long kernel) holds up every later one on it, whichever
// stream it came from, as on a GPU. Positions are taken under the stream's
// mutex at enqueue (so a stream's own order is kept) and given back when
// the operation completes or is dropped. Thread-safe; Release() notifies
// Progress, so never call it with a stream's mutex held.
class Connection {
 public:
  uint64_t Take();
  bool AtHead(uint64_t position) const;
  void Release(uint64_t position);

 private:
  mutable std::mutex mu_;
  uint64_t next_ = 0;           // guarded by mu_
  std::set<uint64_t> pending_;  // guarded by mu_
};

class Stream {
 public:
  // Maps the stream onto ctx's next connection (round-robin), or onto a
  // connection of its own when the fake's connections are off. Its kernels
  // run on `sms` SMs (a green context's partition; the device's by
  // default).
  Stream(std::shared_ptr<Context> ctx, unsigned flags, int priority,
         unsigned sms = kDeviceLimits.multiprocessors);
  // Stops and joins the worker if it still runs.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Starts the worker thread; once, before anything is enqueued.
  void Start();

  Context& ctx() const { return *ctx_; }
  const std::shared_ptr<Context>& ctx_ptr() const { return ctx_; }
  const Context* owner() const { return ctx_.get(); }  // for Registry
  unsigned flags() const { return flags_; }
  int priority() const { return priority_; }
  unsigned sms() const { return sms_; }

  // Appends `op` and returns its ticket (1, 2, ... in enqueue order), or 0
  // if the stream is stopped or retired. Thread-safe.
  uint64_t Enqueue(Op op);
  // The ticket of the last operation enqueued (0 if none). Thread-safe.
  uint64_t LastTicket() const;
  // Whether the operation with `ticket` and all before it completed.
  bool Done(uint64_t ticket) const;
  // Whether the worker stopped running work: the stream was stopped, or
  // the context has a sticky error. Pending work will never complete.
  bool Interrupted() const {
    return stopped_.load(std::memory_order_acquire) ||
           ctx_->sticky() != Result::kSuccess;
  }
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }

  // StreamDestroy: refuses new work; the worker exits once it has
  // drained the queue (as CUDA releases a stream when its work is done).
  // Whether the queue was empty (the worker exits at once).
  bool Retire();
  // Whether the worker thread has exited (after Retire or Stop).
  bool exited() const;
  // Drops pending work and makes the worker exit as soon as the running
  // operation returns. Thread-safe; wakes waiters.
  void Stop();
  // Joins the worker. Not on the worker itself.
  void Join();
  // Wakes an idle worker to notice a sticky error. Thread-safe.
  void Wake();

 private:
  struct Item {
    Op op;
    uint64_t position;  // on connection_
  };
  void Run();
  // Gives the positions of `items` back (they were dropped).
  void Release(std::deque<Item>& items);

  const std::shared_ptr<Context> ctx_;
  const std::shared_ptr<Connection> connection_;
  const unsigned flags_;
  const int priority_;
  const unsigned sms_;
  std::atomic<bool> stopped_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // guarded by mu_
  uint64_t enqueued_ = 0;   // guarded by mu_
  uint64_t completed_ = 0;  // guarded by mu_
  bool retired_ = false;    // guarded by mu_
  bool exited_ = false;     // guarded by mu_
  std::mutex join_mu_;      // serializes Join()
  std::thread worker_;
};

// Looks up a stream for an entry point that works on any context's stream
// (query, synchronize, destroy): after CurrentContext(Sticky::kIgnore),
// Result::kInvalidHandle for an unknown, destroyed or NULL stream (the
// fake has no legacy default stream).
Result FindStream(StreamHandle handle, std::shared_ptr<Stream>* stream);

// Looks up a stream to enqueue work on: FindStream, then the sticky error
// of the stream's context; with `same_context`, Result::kInvalidHandle
// unless the stream belongs to the calling thread's current context (as
// CUDA requires for kernel launches).
Result FindStreamForWork(StreamHandle handle, bool same_context,
                         std::shared_ptr<Stream>* stream);

// Starts a stream in the current context (`ctx`) and registers it; its
// handle in *handle. StreamCreateWithPriority's and GreenCtxStreamCreate's
// common part.
Result AddStream(std::shared_ptr<Context> ctx, unsigned flags, int priority,
                 unsigned sms, StreamHandle* handle);

// Enqueues `op` on `stream`: Result::kSuccess, or Result::kInvalidHandle if
// the stream was destroyed meanwhile. Sets *ticket when not null. On a
// capturing stream: Result::kStreamCaptureUnsupported (and the capture is
// invalidated), since the caller means the work to run now.
Result EnqueueOp(Stream& stream, Op op, uint64_t* ticket = nullptr);
// EnqueueOp for work a capture records (fake_gpu.h says which): on a
// capturing stream `op` goes into the capture instead.
Result EnqueueCapturable(Stream& stream, Op op);

// Blocks until the operation `ticket` of `stream` completed: Result::kSuccess,
// the context's sticky error, or Result::kContextIsDestroyed.
Result WaitForTicket(Stream& stream, uint64_t ticket);

}  // namespace fakegpu

#endif  // TESTS_FAKE_GPU_FAKE_STREAM_H_
