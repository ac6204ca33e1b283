// One thread that runs posted closures in order: a backend's cleanup thread.
#ifndef GPUSTREAM_SERVER_UTIL_SERIAL_EXECUTOR_H_
#define GPUSTREAM_SERVER_UTIL_SERIAL_EXECUTOR_H_

#include <deque>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace gpustream::util {

// Closures run one at a time, in post order, on the executor's own thread,
// never on the poster's. Thread-safe. The destructor runs everything posted
// before it (including closures those post), then joins the thread.
class SerialExecutor {
 public:
  SerialExecutor();
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // After Shutdown(), runs `fn` at once on the caller's thread.
  void Post(absl::AnyInvocable<void()> fn);
  // Runs everything posted, then joins the thread. Idempotent; the
  // destructor calls it.
  void Shutdown();
  // True on the executor's own thread.
  bool InExecutor() const { return std::this_thread::get_id() == thread_id_; }
  // Blocks until nothing is left to run, including what the closures run
  // meanwhile post (tests, shutdown). Never call it on the executor.
  void Drain();

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void()>> work_ ABSL_GUARDED_BY(mu_);
  uint64_t posted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::thread::id thread_id_;
};

}  // namespace gpustream::util

#endif  // GPUSTREAM_SERVER_UTIL_SERIAL_EXECUTOR_H_
