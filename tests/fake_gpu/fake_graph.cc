// Stream capture and executable graphs of the emulated GPU (the rules are
// in fake_gpu.h): captures record the ops entry points would have enqueued,
// graphs keep them, and a launch runs them in order as one op of a stream.
#include "tests/fake_gpu/fake_graph.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tests/fake_gpu/fake_progress.h"
#include "tests/fake_gpu/fake_registry.h"

namespace fakegpu {
namespace {

struct Capture {
  std::shared_ptr<Stream> stream;
  int mode;
  std::thread::id thread;  // The one that began it.
  std::vector<Op> ops;
  Result invalidated = Result::kSuccess;  // The first violation's code.
};

// Every capture in progress in the process. `count` lets enqueueing skip
// the lock while nothing captures (the common case, and the hot path).
struct Captures {
  std::mutex mu;
  std::vector<std::shared_ptr<Capture>> active;  // guarded by mu
  std::atomic<size_t> count{0};
};
Captures& AllCaptures() {
  static Captures* captures = new Captures;  // Used by stream workers.
  return *captures;
}

Capture* FindLocked(Captures& all, const Stream* stream) {
  for (const std::shared_ptr<Capture>& c : all.active) {
    if (c->stream.get() == stream) return c.get();
  }
  return nullptr;
}

std::shared_ptr<Capture> RemoveLocked(Captures& all, const Stream* stream) {
  auto it = std::find_if(
      all.active.begin(), all.active.end(),
      [stream](const auto& c) { return c->stream.get() == stream; });
  if (it == all.active.end()) return nullptr;
  std::shared_ptr<Capture> capture = std::move(*it);
  all.active.erase(it);
  all.count.fetch_sub(1, std::memory_order_release);
  return capture;
}

void Invalidate(Capture& capture) {
  if (capture.invalidated == Result::kSuccess) {
    capture.invalidated = Result::kStreamCaptureUnsupported;
  }
  capture.ops.clear();
}

// A call that the captures `refuses` picks forbid: invalidates them and
// returns kStreamCaptureUnsupported (kSuccess when it picks none).
template <class Pred>
Result RefuseFor(Pred refuses) {
  Captures& all = AllCaptures();
  if (all.count.load(std::memory_order_acquire) == 0) return Result::kSuccess;
  std::lock_guard<std::mutex> lock(all.mu);
  bool refused = false;
  for (const std::shared_ptr<Capture>& c : all.active) {
    if (refuses(*c)) {
      Invalidate(*c);
      refused = true;
    }
  }
  return refused ? Result::kStreamCaptureUnsupported : Result::kSuccess;
}

struct Graph {
  std::shared_ptr<Context> ctx;
  std::vector<Op> ops;
  std::atomic<bool> busy{false};
  const Context* owner() const { return ctx.get(); }
};

struct GraphExec {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<const std::vector<Op>> ops;
  std::atomic<bool> busy{false};
  // The previous launch, which the next one runs after.
  std::mutex mu;
  std::weak_ptr<Stream> last_stream;  // guarded by mu
  uint64_t last_ticket = 0;           // guarded by mu
  const Context* owner() const { return ctx.get(); }
};

std::atomic<uint64_t> g_graph_launches{0};

Registry<Graph>& Graphs() {
  static Registry<Graph>* graphs = new Registry<Graph>;
  return *graphs;
}
Registry<GraphExec>& Execs() {
  static Registry<GraphExec>* execs = new Registry<GraphExec>;
  return *execs;
}

// One call's use of a graph object. The vendors' graph objects are not
// internally synchronized: a second thread inside a call on the same one
// is a caller's bug that a real driver turns into corruption.
class Exclusive {
 public:
  explicit Exclusive(std::atomic<bool>& busy) : busy_(busy) {
    if (busy_.exchange(true, std::memory_order_acquire)) {
      Misuse("a graph object used by two threads at once");
    }
  }
  ~Exclusive() { busy_.store(false, std::memory_order_release); }
  Exclusive(const Exclusive&) = delete;
  Exclusive& operator=(const Exclusive&) = delete;

 private:
  std::atomic<bool>& busy_;
};

// Unregisters a graph or an executable graph (GraphDestroy,
// GraphExecDestroy).
template <class T>
Result Destroy(Registry<T>& registry, uintptr_t handle) {
  std::shared_ptr<Context> current;
  if (Result r = CurrentContext(Sticky::kIgnore, &current);
      r != Result::kSuccess) {
    return r;
  }
  std::shared_ptr<T> object = registry.Remove(handle);
  if (object == nullptr) return Result::kInvalidHandle;
  Exclusive use(object->busy);
  return Result::kSuccess;
}

}  // namespace

bool Captured(Stream& stream, Op& op, bool capturable, Result* result) {
  Captures& all = AllCaptures();
  if (all.count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(all.mu);
  Capture* capture = FindLocked(all, &stream);
  if (capture == nullptr) return false;
  if (!capturable) {
    Invalidate(*capture);
    *result = Result::kStreamCaptureUnsupported;
  } else if (capture->invalidated != Result::kSuccess) {
    *result = Result::kStreamCaptureInvalidated;
  } else {
    capture->ops.push_back(std::move(op));
    *result = Result::kSuccess;
  }
  return true;
}

Result CheckNotCapturing(const Stream& stream) {
  Captures& all = AllCaptures();
  if (all.count.load(std::memory_order_acquire) == 0) return Result::kSuccess;
  std::lock_guard<std::mutex> lock(all.mu);
  Capture* capture = FindLocked(all, &stream);
  if (capture == nullptr) return Result::kSuccess;
  Invalidate(*capture);
  return Result::kStreamCaptureUnsupported;
}

// Every thread's capture interaction mode is the default (global): the
// fake does not model cuThreadExchangeStreamCaptureMode.
Result CheckCaptureSafe() {
  const std::thread::id self = std::this_thread::get_id();
  return RefuseFor([self](const Capture& c) {
    return c.mode == kCaptureModeGlobal ||
           (c.mode == kCaptureModeThreadLocal && c.thread == self);
  });
}

Result CheckNoCaptureIn(const Context& ctx) {
  return RefuseFor(
      [&ctx](const Capture& c) { return c.stream->owner() == &ctx; });
}

void ReleaseGraphs(const Context* ctx) {
  Graphs().RemoveOwnedBy(ctx);
  Execs().RemoveOwnedBy(ctx);
  Captures& all = AllCaptures();
  std::vector<std::shared_ptr<Capture>> ended;  // Dropped outside the lock.
  std::lock_guard<std::mutex> lock(all.mu);
  for (auto it = all.active.begin(); it != all.active.end();) {
    if ((*it)->stream->owner() == ctx) {
      ended.push_back(std::move(*it));
      it = all.active.erase(it);
      all.count.fetch_sub(1, std::memory_order_release);
    } else {
      ++it;
    }
  }
}

Result StreamBeginCapture(StreamHandle handle, int mode) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(handle, false, &stream);
      r != Result::kSuccess) {
    return r;
  }
  if (mode < kCaptureModeGlobal || mode > kCaptureModeRelaxed) {
    return Result::kInvalidValue;
  }
  Captures& all = AllCaptures();
  std::lock_guard<std::mutex> lock(all.mu);
  if (FindLocked(all, stream.get()) != nullptr) return Result::kIllegalState;
  auto capture = std::make_shared<Capture>();
  capture->stream = std::move(stream);
  capture->mode = mode;
  capture->thread = std::this_thread::get_id();
  all.active.push_back(std::move(capture));
  all.count.fetch_add(1, std::memory_order_release);
  return Result::kSuccess;
}

Result StreamEndCapture(StreamHandle handle, GraphHandle* graph) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStream(handle, &stream); r != Result::kSuccess) return r;
  if (graph == nullptr) return Result::kInvalidValue;
  std::shared_ptr<Capture> capture;
  {
    Captures& all = AllCaptures();
    std::lock_guard<std::mutex> lock(all.mu);
    Capture* found = FindLocked(all, stream.get());
    if (found == nullptr) return Result::kIllegalState;
    if (found->mode != kCaptureModeRelaxed &&
        found->thread != std::this_thread::get_id()) {
      return Result::kStreamCaptureWrongThread;  // The capture goes on.
    }
    capture = RemoveLocked(all, stream.get());
  }
  *graph = nullptr;
  if (capture->invalidated != Result::kSuccess) {
    return Result::kStreamCaptureInvalidated;
  }
  auto made = std::make_shared<Graph>();
  made->ctx = stream->ctx_ptr();
  made->ops = std::move(capture->ops);
  const uintptr_t value = Graphs().Add(std::move(made));
  if (value == 0) return Result::kContextIsDestroyed;
  *graph = ToHandle<GraphHandle>(value);
  return Result::kSuccess;
}

Result StreamIsCapturing(StreamHandle handle, bool* capturing) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStream(handle, &stream); r != Result::kSuccess) return r;
  if (capturing == nullptr) return Result::kInvalidValue;
  Captures& all = AllCaptures();
  std::lock_guard<std::mutex> lock(all.mu);
  *capturing = FindLocked(all, stream.get()) != nullptr;
  return Result::kSuccess;
}

Result GraphInstantiate(GraphExecHandle* exec, GraphHandle handle) {
  std::shared_ptr<Context> current;
  if (Result r = CurrentContext(Sticky::kFail, &current);
      r != Result::kSuccess) {
    return r;
  }
  if (exec == nullptr) return Result::kInvalidValue;
  std::shared_ptr<Graph> graph = Graphs().Find(HandleValue(handle));
  if (graph == nullptr) return Result::kInvalidHandle;
  Exclusive use(graph->busy);
  auto made = std::make_shared<GraphExec>();
  made->ctx = graph->ctx;
  made->ops = std::make_shared<const std::vector<Op>>(graph->ops);
  const uintptr_t value = Execs().Add(std::move(made));
  if (value == 0) return Result::kContextIsDestroyed;
  *exec = ToHandle<GraphExecHandle>(value);
  return Result::kSuccess;
}

Result GraphDestroy(GraphHandle handle) {
  return Destroy(Graphs(), HandleValue(handle));
}

// A launch in flight keeps the recorded work (as CUDA frees an executable
// graph destroyed in flight once it completes).
Result GraphExecDestroy(GraphExecHandle handle) {
  return Destroy(Execs(), HandleValue(handle));
}

Result GraphLaunch(GraphExecHandle handle, StreamHandle hStream) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(hStream, false, &stream);
      r != Result::kSuccess) {
    return r;
  }
  std::shared_ptr<GraphExec> exec = Execs().Find(HandleValue(handle));
  if (exec == nullptr) return Result::kInvalidHandle;
  if (exec->ctx != stream->ctx_ptr()) return Result::kInvalidContext;
  Exclusive use(exec->busy);
  std::lock_guard<std::mutex> lock(exec->mu);
  // Weak: the op may outlive the previous launch's stream, and must not be
  // the last owner of its own stream (its worker would join itself).
  Op run = [ops = exec->ops, previous = exec->last_stream,
            after = exec->last_ticket](Stream& s) -> Result {
    if (std::shared_ptr<Stream> p = previous.lock()) {
      Progress::Wait([&] {
        return p->Done(after) || p->Interrupted() || s.Interrupted();
      });
    }
    for (const Op& op : *ops) {
      if (s.Interrupted()) return Result::kSuccess;
      if (Result r = op(s); r != Result::kSuccess) return r;
    }
    return Result::kSuccess;
  };
  uint64_t ticket = 0;
  if (Result r = EnqueueOp(*stream, std::move(run), &ticket);
      r != Result::kSuccess) {
    return r;
  }
  exec->last_stream = stream;
  exec->last_ticket = ticket;
  g_graph_launches.fetch_add(1, std::memory_order_relaxed);
  return Result::kSuccess;
}

uint64_t GraphLaunches() {
  return g_graph_launches.load(std::memory_order_relaxed);
}

}  // namespace fakegpu
