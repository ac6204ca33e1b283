// SerialExecutor: a deque drained by one thread.
#include "server/util/serial_executor.h"

#include <utility>

namespace gpustream::util {

SerialExecutor::SerialExecutor() {
  thread_ = std::thread(&SerialExecutor::Loop, this);
  thread_id_ = thread_.get_id();
}

SerialExecutor::~SerialExecutor() { Shutdown(); }

void SerialExecutor::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  thread_.join();
}

void SerialExecutor::Post(absl::AnyInvocable<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      work_.push_back(std::move(fn));
      ++posted_;
      return;
    }
  }
  fn();
}

void SerialExecutor::Drain() {
  absl::MutexLock lock(&mu_);
  // Until empty: closures posted by the closures being drained count too.
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ == posted_;
  };
  mu_.Await(absl::Condition(&done));
}

void SerialExecutor::Loop() {
  while (true) {
    absl::AnyInvocable<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !work_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (work_.empty()) {  // Stopping, and everything has run.
        stopped_ = true;    // Later posts run on their callers' threads.
        return;
      }
      fn = std::move(work_.front());
      work_.pop_front();
    }
    fn();
    fn = nullptr;  // Captures die here, still on this thread.
    absl::MutexLock lock(&mu_);
    ++done_;
  }
}

}  // namespace gpustream::util
