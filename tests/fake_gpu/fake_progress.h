// The emulated GPU's process-wide "device work progressed" signal.
//
// Whatever waits for emulated device work (StreamSynchronize,
// EventSynchronize, CtxSynchronize, a stream worker waiting on another
// stream's event record, a copy to pageable memory, spin_ns) waits here;
// whatever completes work, faults a context or stops a stream calls
// Notify() after changing its state.
//
// Lock order: a waiter's predicate runs under the progress mutex and may
// take a stream's or an event's mutex; so Notify() must never be called
// with such a mutex held. One signal for all streams is simple and cannot
// lose a wake-up across streams; waiters only re-check a cheap predicate.
#ifndef TESTS_FAKE_GPU_FAKE_PROGRESS_H_
#define TESTS_FAKE_GPU_FAKE_PROGRESS_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace fakegpu {

class Progress {
 public:
  // Wakes every waiter to re-check its predicate. Thread-safe.
  static void Notify() {
    State& s = state();
    { std::lock_guard<std::mutex> lock(s.mu); }
    s.cv.notify_all();
  }

  // Blocks until done() is true. done() runs under the progress mutex.
  template <class Pred>
  static void Wait(Pred done) {
    State& s = state();
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, done);
  }

  // Blocks until done() is true or `deadline` passes; returns done().
  template <class Pred>
  static bool WaitUntil(Pred done,
                        std::chrono::steady_clock::time_point deadline) {
    State& s = state();
    std::unique_lock<std::mutex> lock(s.mu);
    return s.cv.wait_until(lock, deadline, done);
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
  };
  // Never destroyed: stream workers may still run while the process exits.
  static State& state() {
    static State* s = new State;
    return *s;
  }
};

}  // namespace fakegpu

#endif  // TESTS_FAKE_GPU_FAKE_PROGRESS_H_
