// The read-result bytes a session may have in flight.
#ifndef GPUSTREAM_SERVER_SESSION_RESULT_BUDGET_H_
#define GPUSTREAM_SERVER_SESSION_RESULT_BUDGET_H_

#include <atomic>
#include <cstdint>

namespace gpustream::session {

// Bytes that a session's admitted reads promise and that have not yet been
// handed to its client, over all of its Submit streams and unary ReadBuffer
// calls together (ServerLimits.max_pending_result_bytes bounds the total):
// a client cannot multiply the bound by opening streams. Lock-free;
// thread-safe.
class ResultBudget {
 public:
  // Takes `bytes` if the total stays within `limit`; false (taking nothing)
  // otherwise.
  bool TryTake(uint64_t bytes, uint64_t limit) {
    uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit || used > limit - bytes) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes,
                                          std::memory_order_relaxed));
    return true;
  }
  // Gives back bytes taken earlier.
  void Give(uint64_t bytes) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
  }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> used_{0};
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_RESULT_BUDGET_H_
