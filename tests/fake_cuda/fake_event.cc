// Events of the fake CUDA driver. cuEventRecord puts a record on a stream
// that completes (with a timestamp) once the stream has run everything
// enqueued before it; the event remembers only its latest record.
// cuStreamWaitEvent binds to the record current at the time of the call, so
// re-recording the event later does not change what the stream waits for.
#include <chrono>
#include <memory>
#include <mutex>
#include <utility>

#include "tests/fake_cuda/fake_api.h"
#include "tests/fake_cuda/fake_context.h"
#include "tests/fake_cuda/fake_progress.h"
#include "tests/fake_cuda/fake_registry.h"
#include "tests/fake_cuda/fake_stream.h"

namespace fakecuda {
namespace {

// One cuEventRecord. `time` is written before `done` is set (release).
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
  bool timing() const { return (flags_ & CU_EVENT_DISABLE_TIMING) == 0; }

  // The latest record, or nullptr if never recorded. Thread-safe.
  std::shared_ptr<Record> latest() const {
    std::lock_guard<std::mutex> lock(mu_);
    return latest_;
  }

  // Enqueues a new record on `stream` and makes it the latest.
  CUresult RecordOn(Stream& stream) {
    auto record = std::make_shared<Record>();
    std::lock_guard<std::mutex> lock(mu_);  // orders concurrent records
    const CUresult r = EnqueueOp(stream, [record](Stream&) {
      record->time = std::chrono::steady_clock::now();
      record->done.store(true, std::memory_order_release);
      return CUDA_SUCCESS;
    });
    if (r == CUDA_SUCCESS) latest_ = std::move(record);
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
CUresult FindEvent(CUevent handle, std::shared_ptr<Event>* event) {
  std::shared_ptr<Context> current;
  if (CUresult r = CurrentContext(Sticky::kIgnore, &current);
      r != CUDA_SUCCESS) {
    return r;
  }
  *event = Events().Find(HandleValue(handle));
  if (*event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

}  // namespace

void ReleaseEvents(const Context* ctx) { Events().RemoveOwnedBy(ctx); }

// Flags: CU_EVENT_BLOCKING_SYNC (ignored) and CU_EVENT_DISABLE_TIMING;
// CU_EVENT_INTERPROCESS is not supported.
CUresult Fake_cuEventCreate(CUevent* phEvent, unsigned int flags) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(Sticky::kFail, &ctx); r != CUDA_SUCCESS) {
    return r;
  }
  constexpr unsigned kKnown =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (phEvent == nullptr || (flags & ~kKnown) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (flags & CU_EVENT_INTERPROCESS) {
    return (flags & CU_EVENT_DISABLE_TIMING) ? CUDA_ERROR_NOT_SUPPORTED
                                             : CUDA_ERROR_INVALID_VALUE;
  }
  const uintptr_t handle = Events().Add(std::make_shared<Event>(ctx, flags));
  if (handle == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *phEvent = ToHandle<CUevent>(handle);
  return CUDA_SUCCESS;
}

// A pending record still completes; waiters bound to it are unaffected.
CUresult Fake_cuEventDestroy(CUevent handle) {
  std::shared_ptr<Context> current;
  if (CUresult r = CurrentContext(Sticky::kIgnore, &current);
      r != CUDA_SUCCESS) {
    return r;
  }
  return Events().Remove(HandleValue(handle)) != nullptr
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_HANDLE;
}

// The event and the stream must belong to the same context.
CUresult Fake_cuEventRecord(CUevent handle, CUstream hStream) {
  std::shared_ptr<Stream> stream;
  if (CUresult r = FindStreamForWork(hStream, false, &stream);
      r != CUDA_SUCCESS) {
    return r;
  }
  std::shared_ptr<Event> event = Events().Find(HandleValue(handle));
  if (event == nullptr || &event->ctx() != &stream->ctx()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return event->RecordOn(*stream);
}

CUresult Fake_cuEventQuery(CUevent handle) {
  std::shared_ptr<Event> event;
  if (CUresult r = FindEvent(handle, &event); r != CUDA_SUCCESS) return r;
  if (CUresult r = CheckUsable(event->ctx()); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Record> record = event->latest();
  return record == nullptr || Done(*record) ? CUDA_SUCCESS
                                            : CUDA_ERROR_NOT_READY;
}

CUresult Fake_cuEventSynchronize(CUevent handle) {
  std::shared_ptr<Event> event;
  if (CUresult r = FindEvent(handle, &event); r != CUDA_SUCCESS) return r;
  Context& ctx = event->ctx();
  if (CUresult r = CheckUsable(ctx); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Record> record = event->latest();
  if (record == nullptr) return CUDA_SUCCESS;
  Progress::Wait([&] {
    return Done(*record) || ctx.sticky() != CUDA_SUCCESS || ctx.destroyed();
  });
  return CheckUsable(ctx);
}

// As documented for CUDA: CUDA_ERROR_INVALID_HANDLE if either event has
// timing disabled or was never recorded, CUDA_ERROR_NOT_READY if either
// record has not completed.
CUresult Fake_cuEventElapsedTime(float* pMilliseconds, CUevent hStart,
                                 CUevent hEnd) {
  std::shared_ptr<Event> start;
  std::shared_ptr<Event> end;
  if (CUresult r = FindEvent(hStart, &start); r != CUDA_SUCCESS) return r;
  if (CUresult r = FindEvent(hEnd, &end); r != CUDA_SUCCESS) return r;
  if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (&start->ctx() != &end->ctx()) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = CheckUsable(start->ctx()); r != CUDA_SUCCESS) return r;
  if (!start->timing() || !end->timing()) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Record> first = start->latest();
  std::shared_ptr<Record> last = end->latest();
  if (first == nullptr || last == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!Done(*first) || !Done(*last)) return CUDA_ERROR_NOT_READY;
  *pMilliseconds =
      std::chrono::duration<float, std::milli>(last->time - first->time)
          .count();
  return CUDA_SUCCESS;
}

// Later work on the stream waits for the event's latest record as of now
// (none: no wait). The event may belong to another context; if that
// context is destroyed first, the wait ends.
CUresult Fake_cuStreamWaitEvent(CUstream hStream, CUevent handle,
                                unsigned int flags) {
  std::shared_ptr<Stream> stream;
  if (CUresult r = FindStreamForWork(hStream, false, &stream);
      r != CUDA_SUCCESS) {
    return r;
  }
  std::shared_ptr<Event> event = Events().Find(HandleValue(handle));
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Record> record = event->latest();
  if (record == nullptr || Done(*record)) return CUDA_SUCCESS;
  return EnqueueOp(
      *stream, [record, owner = event->ctx_ptr()](Stream& s) -> CUresult {
        Progress::Wait([&] {
          return Done(*record) || s.Interrupted() || owner->destroyed();
        });
        return CUDA_SUCCESS;
      });
}

}  // namespace fakecuda
