// The timer thread.
#include "server/util/timer_thread.h"

namespace gpustream::util {

TimerThread::TimerThread() : thread_(&TimerThread::Loop, this) {}

TimerThread::~TimerThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

TimerThread::Id TimerThread::Schedule(absl::Duration delay,
                                      absl::AnyInvocable<void()> fn) {
  absl::MutexLock lock(&mu_);
  const Id id = next_id_++;
  const absl::Time when = absl::Now() + delay;
  due_.emplace(std::make_pair(when, id), std::move(fn));
  deadlines_.emplace(id, when);
  return id;
}

void TimerThread::Cancel(Id id) {
  absl::AnyInvocable<void()> dropped;  // Destroyed outside the lock.
  absl::MutexLock lock(&mu_);
  auto it = deadlines_.find(id);
  if (it == deadlines_.end()) return;
  auto node = due_.extract({it->second, id});
  dropped = std::move(node.mapped());
  deadlines_.erase(it);
}

void TimerThread::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time next =
        due_.empty() ? absl::InfiniteFuture() : due_.begin()->first.first;
    if (absl::Now() < next) {
      // Wakes when a new earlier deadline arrives or at `next`.
      auto changed = [this, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (!due_.empty() && due_.begin()->first.first < next);
      };
      mu_.AwaitWithDeadline(absl::Condition(&changed), next);
      continue;
    }
    auto node = due_.extract(due_.begin());
    deadlines_.erase(node.key().second);
    mu_.Unlock();
    node.mapped()();
    node.mapped() = nullptr;
    mu_.Lock();
  }
}

}  // namespace gpustream::util
