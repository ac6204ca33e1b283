// Driver state of the emulated GPU: configuration, initialization, and
// the primary contexts with their sticky error.
#ifndef TESTS_FAKE_GPU_FAKE_CONTEXT_H_
#define TESTS_FAKE_GPU_FAKE_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "tests/fake_gpu/fake_gpu.h"

namespace fakegpu {

class CallbackThread;
class Connection;
class Stream;

// Settings that the first successful Init reads from the environment.
// The hazards of a real driver are all on by default; each knob turns one
// off for a test that looks at something else.
struct Config {
  int devices = 1;                            // FAKEGPU_DEVICES
  uint64_t memory_bytes = uint64_t{1} << 30;  // FAKEGPU_MEMORY_BYTES
  bool wait_value = true;  // false if FAKEGPU_NO_WAIT_VALUE=1
  // Hardware queues per context that streams share round-robin
  // (CUDA_DEVICE_MAX_CONNECTIONS, read as the driver reads it: default 8,
  // 1..32); 0 with FAKEGPU_SHARED_CONNECTIONS=0: one queue per stream.
  int connections = 8;
  // MemFree/MemFreeHost wait until every stream of the context is idle
  // (FAKEGPU_SYNC_FREE, default 1).
  bool sync_free = true;
  // Device memory is mapped in granules of this many bytes: device work
  // faults only on a granule that holds no allocation of its context, and
  // writes past the end of an allocation inside one land in whatever lives
  // there (FAKEGPU_PAGE_BYTES, default 2 MiB; 0: every access outside its
  // allocation faults).
  uint64_t page_bytes = uint64_t{2} << 20;
  // DevicePrimaryCtxReset clears a sticky error
  // (FAKEGPU_RESET_CLEARS_STICKY, default 0: it survives, as the driver
  // does not promise otherwise).
  bool reset_clears_sticky = false;
};

// Parses the decimal environment variable `name` into *out (left alone if
// unset); false, after saying why on stderr (as the skin's library), if it
// is not in [min, max]. For the skins' knobs too.
bool ParseEnv(const char* name, uint64_t min, uint64_t max, uint64_t* out);

// Reports a use of the driver that a real driver would punish with a
// deadlock or undefined behaviour (a driver call inside a host function, a
// handle of a reset context), then aborts: a test must fail, loudly.
[[noreturn]] void Misuse(const char* what);

// The configuration, or nullptr before Init succeeded. Thread-safe; the
// object never changes once published.
const Config* GetConfig();

// Prologue of the entry points (all but Init): Misuse() on the callback thread
// running a host function (the vendors: "must not make any API calls"; a real
// driver may deadlock), Result::kNotInitialized before Init, else
// Result::kSuccess.
Result CheckInit();

// CheckInit, then Result::kInvalidDevice unless `dev` is an ordinal.
Result CheckDevice(int dev);

// Marks the calling thread as running a host function (LaunchHostFunc).
void SetInHostFunction(bool in_host_function);
// Whether the calling thread runs a host function.
bool InHostFunction();

// A device's primary context. Objects of the context (streams, events,
// memory, modules) hold a shared_ptr to it, so it outlives every use; once
// Destroy()ed (DevicePrimaryCtxReset, or the last release) it owns
// nothing and every entry point rejects it. Thread-safe.
class Context {
 public:
  Context(int device, uintptr_t handle);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  ContextHandle handle() const {
    return reinterpret_cast<ContextHandle>(handle_);
  }
  // For Registry: a context owns itself.
  const Context* owner() const { return this; }

  // Result::kSuccess, or the first fault of device work in this context (sticky
  // until the context is destroyed).
  Result sticky() const { return sticky_.load(std::memory_order_acquire); }
  bool destroyed() const { return destroyed_.load(std::memory_order_acquire); }

  // Records `error` as the sticky error unless one is recorded, and wakes
  // every stream of the context so that it drops its pending work. Called
  // by stream workers; takes the context's and streams' mutexes.
  void Fault(Result error);

  // Adds a stream (started by the caller) to the context; returns
  // Result::kContextIsDestroyed, adding nothing, after Destroy().
  Result AddStream(std::shared_ptr<Stream> stream);
  // The streams of the context, including destroyed ones still draining.
  std::vector<std::shared_ptr<Stream>> Streams() const;
  // Joins and forgets destroyed streams whose worker has exited.
  void ReapStreams();
  // The context's callback thread (started on first use; stopped by
  // Destroy after the streams, whose host functions it runs).
  CallbackThread& callbacks();
  // The connection for a new stream: the context's Config::connections
  // hardware queues in turn, as the driver assigns them, or a new one for
  // each stream when they are off.
  std::shared_ptr<Connection> NextConnection();

  // Destroys everything of the context: stops and joins its streams (their
  // pending work is dropped), unregisters its streams, events, modules and
  // functions, frees its memory, and marks it destroyed. Idempotent. Must
  // not be called on a stream worker.
  void Destroy();

 private:
  const int device_;
  const uintptr_t handle_;
  std::atomic<Result> sticky_{Result::kSuccess};
  std::atomic<bool> destroyed_{false};
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Stream>> streams_;          // guarded by mu_
  std::vector<std::shared_ptr<Connection>> connections_;  // guarded by mu_
  std::unique_ptr<CallbackThread> callbacks_;             // guarded by mu_
  size_t next_connection_ = 0;                            // guarded by mu_
};

// What an entry point does with a sticky error of the context it uses.
enum class Sticky {
  kFail,    // returns it (launches, copies, allocation, queries, ...)
  kIgnore,  // goes on (destroy and free calls)
};

// Resolves the calling thread's current context for an entry point: after
// CheckInit, Result::kInvalidContext if the thread has none (it must call
// CtxSetCurrent), Result::kContextIsDestroyed if it was destroyed,
// and with Sticky::kFail the context's sticky error.
Result CurrentContext(Sticky sticky, std::shared_ptr<Context>* ctx);

// Waits until all work enqueued so far on every stream of `ctx` has
// finished or been dropped (a sticky error, destruction): what the
// driver's synchronizing calls (MemFree, ...) wait for. Not on a stream
// worker.
void DrainContext(Context& ctx);

// DevicePrimaryCtxRetain for a green context: the context itself (null if
// `dev` is not a device). Release with DevicePrimaryCtxRelease.
std::shared_ptr<Context> RetainPrimary(int dev);

// Checks the sticky error and destruction of an object's context:
// Result::kContextIsDestroyed, the sticky error, or Result::kSuccess.
Result CheckUsable(const Context& ctx);

// Unregister and free the objects of a context being destroyed; each
// lives in the file of its kind. Streams are stopped and joined already.
void ReleaseStreams(const Context* ctx);  // fake_stream.cc
void ReleaseEvents(const Context* ctx);   // fake_event.cc
void ReleaseMemory(const Context* ctx);   // fake_memory.cc
void ReleaseModules(const Context* ctx);  // fake_module.cc

// What differs between the vendors the emulated device is served as. Set
// by the skin (libfakecuda, libfakehip) before the first Init. Not
// thread-safe before init.
struct Skin {
  const char* library = "fakegpu";  // In messages.
  // The hardware queues streams share: the environment variable (none:
  // the default) and its default (CUDA_DEVICE_MAX_CONNECTIONS, 8;
  // GPU_MAX_HW_QUEUES, 4).
  const char* connections_env = nullptr;
  int default_connections = 8;
  // A fault of device work aborts the process (ROCm 5.2's runtime does)
  // instead of becoming the context's sticky error.
  bool fault_aborts = false;
};
void SetSkin(const Skin& skin);
const Skin& GetSkin();

}  // namespace fakegpu

#endif  // TESTS_FAKE_GPU_FAKE_CONTEXT_H_
