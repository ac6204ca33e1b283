// The emulated GPU's callback thread: it runs the host functions
// (LaunchHostFunc) of every stream of a context, one at a time, as the
// driver may, so a host function that blocks holds up every other stream's;
// a driver call from one is Misuse().
#ifndef TESTS_FAKE_GPU_FAKE_CALLBACKS_H_
#define TESTS_FAKE_GPU_FAKE_CALLBACKS_H_

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "tests/fake_gpu/fake_gpu.h"

namespace fakegpu {

class CallbackThread {
 public:
  CallbackThread();
  // Stop()s and joins.
  ~CallbackThread();
  CallbackThread(const CallbackThread&) = delete;
  CallbackThread& operator=(const CallbackThread&) = delete;

  // Runs fn(data) on the thread and returns once it has returned; after
  // Stop(), returns without running it (the context is gone). Not on the
  // callback thread itself. Thread-safe.
  void Call(HostFn fn, void* data);
  // Lets the callback running now finish, then ends the thread. Idempotent.
  void Stop();

 private:
  struct Task {
    HostFn fn;
    void* data;
    bool done = false;
  };
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task*> tasks_;  // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  std::mutex join_mu_;       // serializes joins
  std::thread thread_;
};

}  // namespace fakegpu

#endif  // TESTS_FAKE_GPU_FAKE_CALLBACKS_H_
