// Streams of the emulated GPU, and the entry points that create them,
// wait for them and put stream-memory operations and host functions on
// them. Each stream runs its work strictly in order on its own thread.
#include "tests/fake_gpu/fake_stream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include "tests/fake_gpu/fake_callbacks.h"
#include "tests/fake_gpu/fake_gpu.h"
#include "tests/fake_gpu/fake_graph.h"
#include "tests/fake_gpu/fake_memory.h"
#include "tests/fake_gpu/fake_progress.h"
#include "tests/fake_gpu/fake_registry.h"

namespace fakegpu {
namespace {

Registry<Stream>& Streams() {
  static Registry<Stream>* streams = new Registry<Stream>;
  return *streams;
}

// StreamWaitValue64's condition on the 64-bit word.
bool Satisfied(uint64_t word, uint64_t value, unsigned condition) {
  switch (condition) {
    case kWaitValueGeq:  // CUDA's wrap-around comparison
      return static_cast<int64_t>(word - value) >= 0;
    case kWaitValueEq:
      return word == value;
    case kWaitValueAnd:
      return (word & value) != 0;
    default:  // kWaitValueNor
      return ~(word | value) != 0;
  }
}

// Common checks of StreamWaitValue64/StreamWriteValue64: the feature,
// the stream, and an 8-aligned word that the stream's device may access.
Result FindStreamForMemOp(StreamHandle handle, DevicePtr addr,
                          std::shared_ptr<Stream>* stream) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  if (!GetConfig()->wait_value) return Result::kNotSupported;
  if (Result r = FindStreamForWork(handle, false, stream);
      r != Result::kSuccess) {
    return r;
  }
  if (addr % 8 != 0 ||
      FindAllocation((*stream)->ctx(), addr, 8, Access::kContext) == nullptr) {
    return Result::kInvalidValue;
  }
  return Result::kSuccess;
}

}  // namespace

uint64_t Connection::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.insert(++next_);
  return next_;
}

bool Connection::AtHead(uint64_t position) const {
  std::lock_guard<std::mutex> lock(mu_);
  return !pending_.empty() && *pending_.begin() == position;
}

void Connection::Release(uint64_t position) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(position);
  }
  Progress::Notify();  // the next operation may be at the head now
}

Stream::Stream(std::shared_ptr<Context> ctx, unsigned flags, int priority,
               unsigned sms)
    : ctx_(std::move(ctx)),
      connection_(ctx_->NextConnection()),
      flags_(flags),
      priority_(priority),
      sms_(sms) {}

Stream::~Stream() {
  Stop();
  Join();
}

void Stream::Start() { worker_ = std::thread(&Stream::Run, this); }

uint64_t Stream::Enqueue(Op op) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped() || retired_) return 0;
    queue_.push_back({std::move(op), connection_->Take()});
    ticket = ++enqueued_;
  }
  cv_.notify_all();
  return ticket;
}

uint64_t Stream::LastTicket() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}

bool Stream::Done(uint64_t ticket) const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= ticket;
}

bool Stream::Retire() {
  bool drained;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired_ = true;
    drained = queue_.empty();
  }
  cv_.notify_all();
  return drained;
}

bool Stream::exited() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exited_;
}

void Stream::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  Progress::Notify();
}

void Stream::Wake() {
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

void Stream::Join() {
  std::lock_guard<std::mutex> lock(join_mu_);
  if (worker_.joinable()) worker_.join();
}

void Stream::Release(std::deque<Item>& items) {
  for (const Item& item : items) connection_->Release(item.position);
  items.clear();  // runs captured destructors
}

// The worker: runs operations in order until stopped, or retired and
// drained, each once it is at the head of its connection. Under a sticky
// error it drops whatever is queued, as a faulted GPU context runs nothing
// more (host functions included).
void Stream::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopped() || retired_ || !queue_.empty(); });
    if (stopped() || queue_.empty()) break;  // stopped, or retired + drained
    if (ctx_->sticky() != Result::kSuccess) {
      std::deque<Item> dropped = std::move(queue_);
      queue_.clear();
      lock.unlock();
      Release(dropped);  // outside the lock: Release notifies Progress
      Progress::Notify();
      lock.lock();
      continue;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    // Whatever the connection runs before this operation goes first.
    Progress::Wait(
        [&] { return connection_->AtHead(item.position) || Interrupted(); });
    Result r = Result::kSuccess;
    const bool run = !Interrupted();
    if (run) r = item.op(*this);
    item.op = nullptr;
    if (r != Result::kSuccess) ctx_->Fault(r);
    lock.lock();
    // An interrupted operation did not complete: its waiters see the
    // sticky error or the stop instead.
    if (run && r == Result::kSuccess && !Interrupted()) ++completed_;
    lock.unlock();
    connection_->Release(item.position);
    Progress::Notify();
    lock.lock();
  }
  exited_ = true;
  std::deque<Item> dropped = std::move(queue_);
  queue_.clear();
  lock.unlock();
  Release(dropped);
  Progress::Notify();
}

Result FindStream(StreamHandle handle, std::shared_ptr<Stream>* stream) {
  std::shared_ptr<Context> current;
  if (Result r = CurrentContext(Sticky::kIgnore, &current);
      r != Result::kSuccess) {
    return r;
  }
  *stream = Streams().Find(HandleValue(handle));
  return *stream != nullptr ? Result::kSuccess : Result::kInvalidHandle;
}

Result FindStreamForWork(StreamHandle handle, bool same_context,
                         std::shared_ptr<Stream>* stream) {
  std::shared_ptr<Context> current;
  if (Result r = CurrentContext(Sticky::kIgnore, &current);
      r != Result::kSuccess) {
    return r;
  }
  *stream = Streams().Find(HandleValue(handle));
  if (*stream == nullptr) return Result::kInvalidHandle;
  if (Result r = CheckUsable((*stream)->ctx()); r != Result::kSuccess) return r;
  if (same_context && &(*stream)->ctx() != current.get()) {
    return Result::kInvalidHandle;
  }
  return Result::kSuccess;
}

namespace {

// EnqueueOp and EnqueueCapturable: one capture check, then the stream.
Result Enqueue(Stream& stream, Op op, uint64_t* ticket, bool capturable) {
  if (Result captured; Captured(stream, op, capturable, &captured)) {
    return captured;
  }
  const uint64_t t = stream.Enqueue(std::move(op));
  if (t == 0) {
    return stream.stopped() ? Result::kContextIsDestroyed
                            : Result::kInvalidHandle;
  }
  if (ticket != nullptr) *ticket = t;
  return Result::kSuccess;
}

}  // namespace

Result EnqueueOp(Stream& stream, Op op, uint64_t* ticket) {
  return Enqueue(stream, std::move(op), ticket, /*capturable=*/false);
}

Result EnqueueCapturable(Stream& stream, Op op) {
  return Enqueue(stream, std::move(op), nullptr, /*capturable=*/true);
}

Result WaitForTicket(Stream& stream, uint64_t ticket) {
  Progress::Wait([&] {
    return stream.Done(ticket) || stream.Interrupted() ||
           stream.ctx().destroyed();
  });
  if (Result r = CheckUsable(stream.ctx()); r != Result::kSuccess) return r;
  return stream.Done(ticket) ? Result::kSuccess : Result::kContextIsDestroyed;
}

void ReleaseStreams(const Context* ctx) { Streams().RemoveOwnedBy(ctx); }

// Flags: 0 or kStreamNonBlocking. The priority is clamped to [-5, 0]
// and recorded; the fake does not schedule by it.
Result StreamCreateWithPriority(StreamHandle* phStream, unsigned int flags,
                                int priority) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (phStream == nullptr || (flags & ~unsigned{kStreamNonBlocking})) {
    return Result::kInvalidValue;
  }
  return AddStream(std::move(ctx), flags, priority,
                   kDeviceLimits.multiprocessors, phStream);
}

Result AddStream(std::shared_ptr<Context> ctx, unsigned flags, int priority,
                 unsigned sms, StreamHandle* handle) {
  ctx->ReapStreams();
  auto stream =
      std::make_shared<Stream>(ctx, flags, std::clamp(priority, -5, 0), sms);
  stream->Start();
  if (Result r = ctx->AddStream(stream); r != Result::kSuccess) return r;
  const uintptr_t value = Streams().Add(stream);
  if (value == 0) return Result::kContextIsDestroyed;
  *handle = ToHandle<StreamHandle>(value);
  return Result::kSuccess;
}

// Returns at once; the stream finishes its queued work, then goes away.
Result StreamDestroy(StreamHandle handle) {
  std::shared_ptr<Context> current;
  if (Result r = CurrentContext(Sticky::kIgnore, &current);
      r != Result::kSuccess) {
    return r;
  }
  std::shared_ptr<Stream> stream = Streams().Remove(HandleValue(handle));
  if (stream == nullptr) return Result::kInvalidHandle;
  // An idle stream's worker exits at once: join it now rather than leave a
  // finished thread for a later stream creation to reap.
  if (stream->Retire()) stream->Join();
  stream->ctx().ReapStreams();
  return Result::kSuccess;
}

Result StreamQuery(StreamHandle handle) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStream(handle, &stream); r != Result::kSuccess) return r;
  if (Result r = CheckUsable(stream->ctx()); r != Result::kSuccess) return r;
  if (Result r = CheckNotCapturing(*stream); r != Result::kSuccess) return r;
  return stream->Done(stream->LastTicket()) ? Result::kSuccess
                                            : Result::kNotReady;
}

Result StreamSynchronize(StreamHandle handle) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStream(handle, &stream); r != Result::kSuccess) return r;
  if (Result r = CheckUsable(stream->ctx()); r != Result::kSuccess) return r;
  if (Result r = CheckNotCapturing(*stream); r != Result::kSuccess) return r;
  return WaitForTicket(*stream, stream->LastTicket());
}

// Later work on the stream waits until the word at `addr` satisfies the
// condition. The host changes the word with stores the fake cannot see, so
// the worker polls it like a GPU: acquire loads, sleeping 10 us, doubling
// up to 200 us, in between.
Result StreamWaitValue64(StreamHandle handle, DevicePtr addr, uint64_t value,
                         unsigned int flags) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForMemOp(handle, addr, &stream);
      r != Result::kSuccess) {
    return r;
  }
  if (flags & kWaitValueFlush) return Result::kNotSupported;
  if (flags > kWaitValueNor) return Result::kInvalidValue;
  return EnqueueCapturable(*stream, [addr, value, flags](Stream& s) -> Result {
    std::shared_ptr<Allocation> hold;
    if (Result r = DeviceAccess(s.ctx(), addr, 8, 8, Access::kContext, &hold);
        r != Result::kSuccess) {
      return r;
    }
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(addr));
    auto pause = std::chrono::microseconds(10);
    while (!Satisfied(word.load(std::memory_order_acquire), value, flags)) {
      if (s.Interrupted()) return Result::kSuccess;
      // Memory freed under a waiting GPU is an access to no allocation.
      if (!hold->live.load()) return Result::kIllegalAddress;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
    return Result::kSuccess;
  });
}

// Stores `value` at `addr` (a release store) when the stream reaches it.
Result StreamWriteValue64(StreamHandle handle, DevicePtr addr, uint64_t value,
                          unsigned int flags) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForMemOp(handle, addr, &stream);
      r != Result::kSuccess) {
    return r;
  }
  if (flags & ~unsigned{kWriteValueNoMemoryBarrier}) {
    return Result::kInvalidValue;
  }
  return EnqueueCapturable(*stream, [addr, value](Stream& s) -> Result {
    std::shared_ptr<Allocation> hold;
    if (Result r = DeviceAccess(s.ctx(), addr, 8, 8, Access::kContext, &hold);
        r != Result::kSuccess) {
      return r;
    }
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(addr))
        .store(value, std::memory_order_release);
    return Result::kSuccess;
  });
}

// fn(userData) runs on the context's one callback thread when the stream
// reaches it, unless the context has faulted by then; the stream goes on
// once it returns. A driver call from fn aborts the process (Misuse).
Result LaunchHostFunc(StreamHandle handle, HostFn fn, void* userData) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(handle, false, &stream);
      r != Result::kSuccess) {
    return r;
  }
  if (fn == nullptr) return Result::kInvalidValue;
  return EnqueueCapturable(*stream, [fn, userData](Stream& s) {
    s.ctx().callbacks().Call(fn, userData);
    return Result::kSuccess;
  });
}

}  // namespace fakegpu
