// Events of the emulated GPU. EventRecord puts a record on a stream
// that completes (with a timestamp) once the stream has run everything
// enqueued before it; the event remembers only its latest record.
// StreamWaitEvent binds to the record current at the time of the call, so
// re-recording the event later does not change what the stream waits for.
#include <chrono>
#include <memory>
#include <mutex>
#include <utility>

#include "tests/fake_gpu/fake_context.h"
#include "tests/fake_gpu/fake_gpu.h"
#include "tests/fake_gpu/fake_progress.h"
#include "tests/fake_gpu/fake_registry.h"
#include "tests/fake_gpu/fake_stream.h"

namespace fakegpu {
namespace {

// One EventRecord. `time` is written before `done` is set (release).
struct Record {
  std::atomic<bool> done{false};
  std::chrono::steady_clock::time_point time;
};

class Event {
 public:
  Event(std::shared_ptr<Context> ctx, unsigned flags)
      : ctx_(std::move(ctx)), flags_(flags) {}

  Context& ctx() const { return *ctx_; }
  const std::shared_ptr<Context>& ctx_ptr() const { return ctx_; }
  const Context* owner() const { return ctx_.get(); }  // for Registry
  bool timing() const { return (flags_ & kEventDisableTiming) == 0; }

  // The latest record, or nullptr if never recorded. Thread-safe.
  std::shared_ptr<Record> latest() const {
    std::lock_guard<std::mutex> lock(mu_);
    return latest_;
  }

  // Enqueues a new record on `stream` and makes it the latest.
  Result RecordOn(Stream& stream) {
    auto record = std::make_shared<Record>();
    std::lock_guard<std::mutex> lock(mu_);  // orders concurrent records
    const Result r = EnqueueOp(stream, [record](Stream&) {
      record->time = std::chrono::steady_clock::now();
      record->done.store(true, std::memory_order_release);
      return Result::kSuccess;
    });
    if (r == Result::kSuccess) latest_ = std::move(record);
    return r;
  }

 private:
  const std::shared_ptr<Context> ctx_;
  const unsigned flags_;
  mutable std::mutex mu_;
  std::shared_ptr<Record> latest_;  // guarded by mu_
};

Registry<Event>& Events() {
  static Registry<Event>* events = new Registry<Event>;
  return *events;
}

bool Done(const Record& record) {
  return record.done.load(std::memory_order_acquire);
}

// Looks up an event for an entry point that accepts any context's event.
Result FindEvent(EventHandle handle, std::shared_ptr<Event>* event) {
  std::shared_ptr<Context> current;
  if (Result r = CurrentContext(Sticky::kIgnore, &current);
      r != Result::kSuccess) {
    return r;
  }
  *event = Events().Find(HandleValue(handle));
  if (*event == nullptr) return Result::kInvalidHandle;
  return Result::kSuccess;
}

}  // namespace

void ReleaseEvents(const Context* ctx) { Events().RemoveOwnedBy(ctx); }

// Flags: kEventBlockingSync (ignored) and kEventDisableTiming;
// kEventInterprocess is not supported.
Result EventCreate(EventHandle* phEvent, unsigned int flags) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  constexpr unsigned kKnown =
      kEventBlockingSync | kEventDisableTiming | kEventInterprocess;
  if (phEvent == nullptr || (flags & ~kKnown) != 0) {
    return Result::kInvalidValue;
  }
  if (flags & kEventInterprocess) {
    return (flags & kEventDisableTiming) ? Result::kNotSupported
                                         : Result::kInvalidValue;
  }
  const uintptr_t handle = Events().Add(std::make_shared<Event>(ctx, flags));
  if (handle == 0) return Result::kContextIsDestroyed;
  *phEvent = ToHandle<EventHandle>(handle);
  return Result::kSuccess;
}

// A pending record still completes; waiters bound to it are unaffected.
Result EventDestroy(EventHandle handle) {
  std::shared_ptr<Context> current;
  if (Result r = CurrentContext(Sticky::kIgnore, &current);
      r != Result::kSuccess) {
    return r;
  }
  return Events().Remove(HandleValue(handle)) != nullptr
             ? Result::kSuccess
             : Result::kInvalidHandle;
}

// The event and the stream must belong to the same context.
Result EventRecord(EventHandle handle, StreamHandle hStream) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(hStream, false, &stream);
      r != Result::kSuccess) {
    return r;
  }
  std::shared_ptr<Event> event = Events().Find(HandleValue(handle));
  if (event == nullptr || &event->ctx() != &stream->ctx()) {
    return Result::kInvalidHandle;
  }
  return event->RecordOn(*stream);
}

Result EventQuery(EventHandle handle) {
  std::shared_ptr<Event> event;
  if (Result r = FindEvent(handle, &event); r != Result::kSuccess) return r;
  if (Result r = CheckUsable(event->ctx()); r != Result::kSuccess) return r;
  std::shared_ptr<Record> record = event->latest();
  return record == nullptr || Done(*record) ? Result::kSuccess
                                            : Result::kNotReady;
}

Result EventSynchronize(EventHandle handle) {
  std::shared_ptr<Event> event;
  if (Result r = FindEvent(handle, &event); r != Result::kSuccess) return r;
  Context& ctx = event->ctx();
  if (Result r = CheckUsable(ctx); r != Result::kSuccess) return r;
  std::shared_ptr<Record> record = event->latest();
  if (record == nullptr) return Result::kSuccess;
  Progress::Wait([&] {
    return Done(*record) || ctx.sticky() != Result::kSuccess || ctx.destroyed();
  });
  return CheckUsable(ctx);
}

// As documented for CUDA: Result::kInvalidHandle if either event has
// timing disabled or was never recorded, Result::kNotReady if either
// record has not completed.
Result EventElapsedTime(float* pMilliseconds, EventHandle hStart,
                        EventHandle hEnd) {
  std::shared_ptr<Event> start;
  std::shared_ptr<Event> end;
  if (Result r = FindEvent(hStart, &start); r != Result::kSuccess) return r;
  if (Result r = FindEvent(hEnd, &end); r != Result::kSuccess) return r;
  if (pMilliseconds == nullptr) return Result::kInvalidValue;
  if (&start->ctx() != &end->ctx()) return Result::kInvalidHandle;
  if (Result r = CheckUsable(start->ctx()); r != Result::kSuccess) return r;
  if (!start->timing() || !end->timing()) return Result::kInvalidHandle;
  std::shared_ptr<Record> first = start->latest();
  std::shared_ptr<Record> last = end->latest();
  if (first == nullptr || last == nullptr) return Result::kInvalidHandle;
  if (!Done(*first) || !Done(*last)) return Result::kNotReady;
  *pMilliseconds =
      std::chrono::duration<float, std::milli>(last->time - first->time)
          .count();
  return Result::kSuccess;
}

// Later work on the stream waits for the event's latest record as of now
// (none: no wait). The event may belong to another context; if that
// context is destroyed first, the wait ends.
Result StreamWaitEvent(StreamHandle hStream, EventHandle handle,
                       unsigned int flags) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(hStream, false, &stream);
      r != Result::kSuccess) {
    return r;
  }
  std::shared_ptr<Event> event = Events().Find(HandleValue(handle));
  if (event == nullptr) return Result::kInvalidHandle;
  if (flags != 0) return Result::kInvalidValue;
  std::shared_ptr<Record> record = event->latest();
  if (record == nullptr || Done(*record)) return Result::kSuccess;
  return EnqueueOp(
      *stream, [record, owner = event->ctx_ptr()](Stream& s) -> Result {
        Progress::Wait([&] {
          return Done(*record) || s.Interrupted() || owner->destroyed();
        });
        return Result::kSuccess;
      });
}

}  // namespace fakegpu
