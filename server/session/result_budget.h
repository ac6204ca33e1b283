// The read-result bytes a session may have in flight.
#ifndef GPUSTREAM_SERVER_SESSION_RESULT_BUDGET_H_
#define GPUSTREAM_SERVER_SESSION_RESULT_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

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
  // Takes `bytes` whatever the total (work already admitted that still
  // holds memory).
  void TakeAnyway(uint64_t bytes) {
    used_.fetch_add(bytes, std::memory_order_relaxed);
  }
  // Gives back bytes taken earlier.
  void Give(uint64_t bytes) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
  }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> used_{0};
};

// What a read still queued on the device holds of its session's budget once
// its caller went away. The caller gives its read's bytes back as soon as it
// stops waiting (it will send nothing), but the device still does the read
// when its queue reaches it, into a pinned staging buffer on a GPU: Orphan()
// takes the bytes again for the session until the read has run (Done()) or
// was dropped with its queue (destruction). Without it a client could queue
// reads behind a gate, give up on them and repeat, pinning host memory past
// max_pending_result_bytes. Shared by the read's callback and the call's
// cancellation; thread-safe.
class OrphanedRead {
 public:
  OrphanedRead(std::shared_ptr<ResultBudget> budget, uint64_t bytes)
      : budget_(std::move(budget)), bytes_(bytes) {}
  ~OrphanedRead() {
    if (state_.load(std::memory_order_acquire) == kOrphaned) {
      budget_->Give(bytes_);
    }
  }
  OrphanedRead(const OrphanedRead&) = delete;
  OrphanedRead& operator=(const OrphanedRead&) = delete;

  // The caller went away (and gives its bytes back): hold them until the
  // read is done. Nothing if it is done already.
  void Orphan() {
    if (state_.load(std::memory_order_acquire) == kDone) return;
    budget_->TakeAnyway(bytes_);
    int expected = kQueued;
    if (!state_.compare_exchange_strong(expected, kOrphaned,
                                        std::memory_order_acq_rel)) {
      budget_->Give(bytes_);  // Done first.
    }
  }
  // The device did the read (or failed it): what Orphan() took goes back.
  void Done() {
    if (state_.exchange(kDone, std::memory_order_acq_rel) == kOrphaned) {
      budget_->Give(bytes_);
    }
  }

 private:
  static constexpr int kQueued = 0, kOrphaned = 1, kDone = 2;
  const std::shared_ptr<ResultBudget> budget_;
  const uint64_t bytes_;
  std::atomic<int> state_{kQueued};
};

}  // namespace gpustream::session

#endif  // GPUSTREAM_SERVER_SESSION_RESULT_BUDGET_H_
