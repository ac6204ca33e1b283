// The emulated GPU's callback thread (fake_callbacks.h).
#include "tests/fake_gpu/fake_callbacks.h"

#include "tests/fake_gpu/fake_context.h"

namespace fakegpu {

CallbackThread::CallbackThread() : thread_([this] { Loop(); }) {}

CallbackThread::~CallbackThread() { Stop(); }

void CallbackThread::Call(HostFn fn, void* data) {
  Task task{fn, data};
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return;
  tasks_.push_back(&task);
  cv_.notify_all();
  cv_.wait(lock, [&] { return task.done; });
}

void CallbackThread::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // Callers still waiting for a callback that will not run now return.
    for (Task* task : tasks_) task->done = true;
    tasks_.clear();
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void CallbackThread::Loop() {
  SetInHostFunction(true);  // every driver call from here is Misuse()
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, nothing left
    Task* task = tasks_.front();
    tasks_.pop_front();
    lock.unlock();
    task->fn(task->data);
    lock.lock();
    task->done = true;
    cv_.notify_all();
  }
}

}  // namespace fakegpu
