// Primary contexts of the fake CUDA driver: one per device, retained and
// released with a reference count, reset (destroyed, to be re-created by
// the next retain) by cuDevicePrimaryCtxReset or the last release. A thread
// uses a context only after cuCtxSetCurrent on that thread.
#include "tests/fake_cuda/fake_context.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tests/fake_cuda/fake_api.h"
#include "tests/fake_cuda/fake_callbacks.h"
#include "tests/fake_cuda/fake_progress.h"
#include "tests/fake_cuda/fake_registry.h"
#include "tests/fake_cuda/fake_stream.h"

namespace fakecuda {
namespace {

struct Primary {
  int refcount = 0;              // survives resets, as in CUDA
  std::shared_ptr<Context> ctx;  // the active context, or null
  // A sticky error that a reset did not clear (Config::reset_clears_sticky
  // off): every later context of the device starts with it, since the
  // driver only promises recovery to a new process.
  CUresult lost = CUDA_SUCCESS;
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

// The calling thread's current context handle (cuCtxSetCurrent), or 0.
thread_local uintptr_t t_current = 0;

// Looks up a context handle: CUDA_ERROR_CONTEXT_IS_DESTROYED for one that
// was destroyed, CUDA_ERROR_INVALID_CONTEXT for anything else unknown.
CUresult FindContext(uintptr_t handle, std::shared_ptr<Context>* ctx) {
  Contexts& c = contexts();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.live.find(handle);
  if (it != c.live.end()) {
    *ctx = it->second;
    return CUDA_SUCCESS;
  }
  return c.destroyed.count(handle) != 0 ? CUDA_ERROR_CONTEXT_IS_DESTROYED
                                        : CUDA_ERROR_INVALID_CONTEXT;
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
CUresult SynchronizeContext(Context& ctx) {
  for (const std::shared_ptr<Stream>& stream : ctx.Streams()) {
    const CUresult r = WaitForTicket(*stream, stream->LastTicket());
    if (r != CUDA_SUCCESS) return r;
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

void Context::Fault(CUresult error) {
  if (GetSkin().fault_aborts) {
    std::fprintf(stderr,
                 "%s: device work faulted (error %d): a queue error aborts "
                 "the process, as ROCm 5.2's runtime does\n",
                 GetSkin().library, static_cast<int>(error));
    std::fflush(stderr);
    std::abort();
  }
  CUresult expected = CUDA_SUCCESS;
  if (!sticky_.compare_exchange_strong(expected, error,
                                       std::memory_order_acq_rel)) {
    return;  // the first fault wins
  }
  for (const std::shared_ptr<Stream>& stream : Streams()) stream->Wake();
  Progress::Notify();
}

CUresult Context::AddStream(std::shared_ptr<Stream> stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (destroyed()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  streams_.push_back(std::move(stream));
  return CUDA_SUCCESS;
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
  ReleaseStreams(this);
  ReleaseEvents(this);
  ReleaseModules(this);
  ReleaseMemory(this);
  Progress::Notify();  // wakes cuEventSynchronize waiters of this context
}

CUresult CurrentContext(Sticky sticky, std::shared_ptr<Context>* ctx) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (t_current == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = FindContext(t_current, ctx); r != CUDA_SUCCESS) {
    return r == CUDA_ERROR_INVALID_CONTEXT ? CUDA_ERROR_CONTEXT_IS_DESTROYED
                                           : r;
  }
  return sticky == Sticky::kFail ? (*ctx)->sticky() : CUDA_SUCCESS;
}

CUresult CheckUsable(const Context& ctx) {
  if (ctx.destroyed()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return ctx.sticky();
}

CUresult Fake_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Contexts& c = contexts();
  std::lock_guard<std::mutex> lock(c.mu);
  Primary& primary = c.primary[dev];
  if (primary.ctx == nullptr) {
    primary.ctx = std::make_shared<Context>(dev, NewHandle());
    c.live.emplace(HandleValue(primary.ctx->handle()), primary.ctx);
    if (primary.lost != CUDA_SUCCESS) primary.ctx->Fault(primary.lost);
  }
  ++primary.refcount;
  *pctx = primary.ctx->handle();
  return CUDA_SUCCESS;
}

// Dropping the last reference destroys the context, as in CUDA.
CUresult Fake_cuDevicePrimaryCtxRelease(CUdevice dev) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  Contexts& c = contexts();
  std::shared_ptr<Context> ctx;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    Primary& primary = c.primary[dev];
    if (primary.refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--primary.refcount == 0) ctx = Deactivate(c, primary);
  }
  if (ctx != nullptr) ctx->Destroy();
  return CUDA_SUCCESS;
}

// Destroys the active context (if any); its handle stays invalid and the
// next retain creates a new context. The reference count is kept. A sticky
// error survives into the new context unless Config::reset_clears_sticky.
CUresult Fake_cuDevicePrimaryCtxReset(CUdevice dev) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  Contexts& c = contexts();
  std::shared_ptr<Context> ctx;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    Primary& primary = c.primary[dev];
    ctx = Deactivate(c, primary);
    if (ctx != nullptr && ctx->sticky() != CUDA_SUCCESS &&
        !GetConfig()->reset_clears_sticky) {
      primary.lost = ctx->sticky();
    }
  }
  if (ctx != nullptr) ctx->Destroy();
  return CUDA_SUCCESS;
}

CUresult Fake_cuCtxSetCurrent(CUcontext handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (handle != nullptr) {
    std::shared_ptr<Context> ctx;
    if (CUresult r = FindContext(HandleValue(handle), &ctx);
        r != CUDA_SUCCESS) {
      return r;
    }
  }
  t_current = HandleValue(handle);
  return CUDA_SUCCESS;
}

CUresult Fake_cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = ToHandle<CUcontext>(t_current);
  return CUDA_SUCCESS;
}

CUresult Fake_cuCtxSynchronize() {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(Sticky::kFail, &ctx); r != CUDA_SUCCESS) {
    return r;
  }
  return SynchronizeContext(*ctx);
}

CUresult Fake_cuCtxSynchronize_v2(CUcontext handle) {
  if (handle == nullptr) return Fake_cuCtxSynchronize();
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Context> ctx;
  if (CUresult r = FindContext(HandleValue(handle), &ctx); r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = CheckUsable(*ctx); r != CUDA_SUCCESS) return r;
  return SynchronizeContext(*ctx);
}

// Priorities: 0 (least, the default) down to -5 (greatest).
CUresult Fake_cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(Sticky::kFail, &ctx); r != CUDA_SUCCESS) {
    return r;
  }
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}

}  // namespace fakecuda
