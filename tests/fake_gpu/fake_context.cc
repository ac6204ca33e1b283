// Contexts of the emulated GPU: the primary one per device, retained and
// released with a reference count, reset (destroyed, to be re-created by
// the next retain) by DevicePrimaryCtxReset or the last release; and
// contexts of the caller's own (CtxCreate/CtxDestroy). A thread uses a
// context only after CtxSetCurrent on that thread.
#include "tests/fake_gpu/fake_context.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tests/fake_gpu/fake_callbacks.h"
#include "tests/fake_gpu/fake_gpu.h"
#include "tests/fake_gpu/fake_graph.h"
#include "tests/fake_gpu/fake_progress.h"
#include "tests/fake_gpu/fake_registry.h"
#include "tests/fake_gpu/fake_stream.h"

namespace fakegpu {
namespace {

struct Primary {
  int refcount = 0;              // survives resets, as in CUDA
  std::shared_ptr<Context> ctx;  // the active context, or null
  // A sticky error that a reset did not clear (Config::reset_clears_sticky
  // off): every later context of the device starts with it, since the
  // driver only promises recovery to a new process.
  Result lost = Result::kSuccess;
};

// All contexts; never destroyed (workers may outlive static destructors).
struct Contexts {
  std::mutex mu;
  std::unordered_map<int, Primary> primary;                      // by device
  std::unordered_map<uintptr_t, std::shared_ptr<Context>> live;  // by handle
  std::unordered_set<uintptr_t> destroyed;                       // handles
};

Contexts& contexts() {
  static Contexts* c = new Contexts;
  return *c;
}

// The calling thread's current context handle (CtxSetCurrent), or 0: the
// top of its context stack; the contexts below it, bottom first.
struct ContextStack {
  uintptr_t current = 0;
  std::vector<uintptr_t> below;
};
ContextStack& Stack() { return PerThread<ContextStack>(); }

// Pops the calling thread's current context: the one below becomes
// current.
void PopCurrent() {
  ContextStack& stack = Stack();
  stack.current = 0;
  if (!stack.below.empty()) {
    stack.current = stack.below.back();
    stack.below.pop_back();
  }
}

// Looks up a context handle: Result::kContextIsDestroyed for one that
// was destroyed, Result::kInvalidContext for anything else unknown.
Result FindContext(uintptr_t handle, std::shared_ptr<Context>* ctx) {
  Contexts& c = contexts();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.live.find(handle);
  if (it != c.live.end()) {
    *ctx = it->second;
    return Result::kSuccess;
  }
  return c.destroyed.count(handle) != 0 ? Result::kContextIsDestroyed
                                        : Result::kInvalidContext;
}

// Takes the active context of `primary` out of the tables; the caller
// Destroy()s it outside the lock. Requires contexts().mu.
std::shared_ptr<Context> Deactivate(Contexts& c, Primary& primary) {
  std::shared_ptr<Context> ctx = std::move(primary.ctx);
  if (ctx != nullptr) {
    const uintptr_t handle = HandleValue(ctx->handle());
    c.live.erase(handle);
    c.destroyed.insert(handle);
  }
  return ctx;
}

// Waits for all work enqueued so far on every stream of `ctx`.
Result SynchronizeContext(Context& ctx) {
  for (const std::shared_ptr<Stream>& stream : ctx.Streams()) {
    const Result r = WaitForTicket(*stream, stream->LastTicket());
    if (r != Result::kSuccess) return r;
  }
  return CheckUsable(ctx);
}

}  // namespace

void DrainContext(Context& ctx) {
  // What was enqueued when the call began, not what keeps coming after.
  std::vector<std::pair<std::shared_ptr<Stream>, uint64_t>> tickets;
  for (std::shared_ptr<Stream>& stream : ctx.Streams()) {
    const uint64_t last = stream->LastTicket();
    tickets.emplace_back(std::move(stream), last);
  }
  for (auto& [stream, ticket] : tickets) WaitForTicket(*stream, ticket);
}

void Context::Fault(Result error) {
  if (GetSkin().fault_aborts) {
    std::fprintf(stderr,
                 "%s: device work faulted (%s): a queue error aborts the "
                 "process, as ROCm 5.2's runtime does\n",
                 GetSkin().library, ResultName(error));
    std::fflush(stderr);
    std::abort();
  }
  Result expected = Result::kSuccess;
  if (!sticky_.compare_exchange_strong(expected, error,
                                       std::memory_order_acq_rel)) {
    return;  // the first fault wins
  }
  for (const std::shared_ptr<Stream>& stream : Streams()) stream->Wake();
  Progress::Notify();
}

Result Context::AddStream(std::shared_ptr<Stream> stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (destroyed()) return Result::kContextIsDestroyed;
  streams_.push_back(std::move(stream));
  return Result::kSuccess;
}

Context::Context(int device, uintptr_t handle)
    : device_(device), handle_(handle) {}

Context::~Context() = default;

CallbackThread& Context::callbacks() {
  std::lock_guard<std::mutex> lock(mu_);
  if (callbacks_ == nullptr) callbacks_ = std::make_unique<CallbackThread>();
  return *callbacks_;
}

std::shared_ptr<Connection> Context::NextConnection() {
  const int count = GetConfig()->connections;
  if (count == 0) return std::make_shared<Connection>();
  std::lock_guard<std::mutex> lock(mu_);
  if (connections_.empty()) {
    for (int i = 0; i < count; ++i) {
      connections_.push_back(std::make_shared<Connection>());
    }
  }
  return connections_[next_connection_++ % connections_.size()];
}

std::vector<std::shared_ptr<Stream>> Context::Streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_;
}

void Context::ReapStreams() {
  std::vector<std::shared_ptr<Stream>> exited;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = streams_.begin(); it != streams_.end();) {
      if ((*it)->exited()) {
        exited.push_back(std::move(*it));
        it = streams_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const std::shared_ptr<Stream>& stream : exited) stream->Join();
}

void Context::Destroy() {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (destroyed()) return;
    destroyed_.store(true, std::memory_order_release);
    streams = std::move(streams_);
    streams_.clear();
  }
  for (const std::shared_ptr<Stream>& stream : streams) stream->Stop();
  for (const std::shared_ptr<Stream>& stream : streams) stream->Join();
  std::unique_ptr<CallbackThread> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    callbacks = std::move(callbacks_);
  }
  if (callbacks != nullptr) callbacks->Stop();
  ReleaseGraphs(this);
  ReleaseStreams(this);
  ReleaseEvents(this);
  ReleaseModules(this);
  ReleaseMemory(this);
  Progress::Notify();  // wakes EventSynchronize waiters of this context
}

Result CurrentContext(Sticky sticky, std::shared_ptr<Context>* ctx) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  if (Stack().current == 0) return Result::kInvalidContext;
  if (Result r = FindContext(Stack().current, ctx); r != Result::kSuccess) {
    return r == Result::kInvalidContext ? Result::kContextIsDestroyed : r;
  }
  return sticky == Sticky::kFail ? (*ctx)->sticky() : Result::kSuccess;
}

Result CheckUsable(const Context& ctx) {
  if (ctx.destroyed()) return Result::kContextIsDestroyed;
  return ctx.sticky();
}

Result DevicePrimaryCtxRetain(ContextHandle* pctx, int dev) {
  if (Result r = CheckDevice(dev); r != Result::kSuccess) return r;
  if (pctx == nullptr) return Result::kInvalidValue;
  Contexts& c = contexts();
  std::lock_guard<std::mutex> lock(c.mu);
  Primary& primary = c.primary[dev];
  if (primary.ctx == nullptr) {
    primary.ctx = std::make_shared<Context>(dev, NewHandle());
    c.live.emplace(HandleValue(primary.ctx->handle()), primary.ctx);
    if (primary.lost != Result::kSuccess) primary.ctx->Fault(primary.lost);
  }
  ++primary.refcount;
  *pctx = primary.ctx->handle();
  return Result::kSuccess;
}

// Dropping the last reference destroys the context, as in CUDA.
Result DevicePrimaryCtxRelease(int dev) {
  if (Result r = CheckDevice(dev); r != Result::kSuccess) return r;
  Contexts& c = contexts();
  std::shared_ptr<Context> ctx;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    Primary& primary = c.primary[dev];
    if (primary.refcount == 0) return Result::kInvalidContext;
    if (--primary.refcount == 0) ctx = Deactivate(c, primary);
  }
  if (ctx != nullptr) ctx->Destroy();
  return Result::kSuccess;
}

// Destroys the active context (if any); its handle stays invalid and the
// next retain creates a new context. The reference count is kept. A sticky
// error survives into the new context unless Config::reset_clears_sticky.
Result DevicePrimaryCtxReset(int dev) {
  if (Result r = CheckDevice(dev); r != Result::kSuccess) return r;
  Contexts& c = contexts();
  std::shared_ptr<Context> ctx;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    Primary& primary = c.primary[dev];
    ctx = Deactivate(c, primary);
    if (ctx != nullptr && ctx->sticky() != Result::kSuccess &&
        !GetConfig()->reset_clears_sticky) {
      primary.lost = ctx->sticky();
    }
  }
  if (ctx != nullptr) ctx->Destroy();
  return Result::kSuccess;
}

// A created context is not a primary one: its sticky error dies with it
// (only a primary context's survives a reset, Primary::lost).
Result CtxCreate(ContextHandle* pctx, unsigned int flags, int dev) {
  if (Result r = CheckDevice(dev); r != Result::kSuccess) return r;
  if (pctx == nullptr || flags != 0) return Result::kInvalidValue;
  auto ctx = std::make_shared<Context>(dev, NewHandle());
  const uintptr_t handle = HandleValue(ctx->handle());
  {
    Contexts& c = contexts();
    std::lock_guard<std::mutex> lock(c.mu);
    c.live.emplace(handle, std::move(ctx));
  }
  ContextStack& stack = Stack();
  if (stack.current != 0) stack.below.push_back(stack.current);
  stack.current = handle;
  *pctx = ToHandle<ContextHandle>(handle);
  return Result::kSuccess;
}

Result CtxPopCurrent(ContextHandle* pctx) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  const uintptr_t current = Stack().current;
  if (current == 0) return Result::kInvalidContext;
  if (pctx != nullptr) *pctx = ToHandle<ContextHandle>(current);
  PopCurrent();
  return Result::kSuccess;
}

Result CtxDestroy(ContextHandle handle) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  Contexts& c = contexts();
  std::shared_ptr<Context> ctx;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.live.find(HandleValue(handle));
    if (it == c.live.end()) {
      return c.destroyed.count(HandleValue(handle)) != 0
                 ? Result::kContextIsDestroyed
                 : Result::kInvalidContext;
    }
    for (const auto& [dev, primary] : c.primary) {
      // A primary context is released, never destroyed.
      if (primary.ctx == it->second) return Result::kInvalidContext;
    }
    ctx = std::move(it->second);
    c.live.erase(it);
    c.destroyed.insert(HandleValue(handle));
  }
  // Popped if current; lower on the stack it stays, dead, as in CUDA (a
  // later pop makes a destroyed context current: calls then fail).
  if (Stack().current == HandleValue(handle)) PopCurrent();
  ctx->Destroy();
  return Result::kSuccess;
}

// The active primary context of `dev` with one more reference (a green
// context's), or null if `dev` is not a device.
std::shared_ptr<Context> RetainPrimary(int dev) {
  ContextHandle handle = nullptr;
  if (DevicePrimaryCtxRetain(&handle, dev) != Result::kSuccess) return nullptr;
  std::shared_ptr<Context> ctx;
  if (FindContext(HandleValue(handle), &ctx) != Result::kSuccess) {
    return nullptr;
  }
  return ctx;
}

Result CtxSetCurrent(ContextHandle handle) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  if (handle != nullptr) {
    std::shared_ptr<Context> ctx;
    if (Result r = FindContext(HandleValue(handle), &ctx);
        r != Result::kSuccess) {
      return r;
    }
  }
  // cuda.h: replaces the top of the thread's context stack; NULL pops it.
  if (handle == nullptr) {
    PopCurrent();
  } else {
    Stack().current = HandleValue(handle);
  }
  return Result::kSuccess;
}

Result CtxGetCurrent(ContextHandle* pctx) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  if (pctx == nullptr) return Result::kInvalidValue;
  *pctx = ToHandle<ContextHandle>(Stack().current);
  return Result::kSuccess;
}

Result CtxCheckCurrent() {
  std::shared_ptr<Context> ctx;
  return CurrentContext(Sticky::kFail, &ctx);
}

Result CtxSynchronize() {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (Result r = CheckCaptureSafe(); r != Result::kSuccess) return r;
  if (Result r = CheckNoCaptureIn(*ctx); r != Result::kSuccess) return r;
  return SynchronizeContext(*ctx);
}

Result ContextSynchronize(ContextHandle handle) {
  if (handle == nullptr) return CtxSynchronize();
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  std::shared_ptr<Context> ctx;
  if (Result r = FindContext(HandleValue(handle), &ctx);
      r != Result::kSuccess) {
    return r;
  }
  if (Result r = CheckUsable(*ctx); r != Result::kSuccess) return r;
  return SynchronizeContext(*ctx);
}

// Priorities: 0 (least, the default) down to -5 (greatest).
Result CtxGetStreamPriorityRange(int* least, int* greatest) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return Result::kSuccess;
}

}  // namespace fakegpu
