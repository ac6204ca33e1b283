// Gives heap the allocator holds free back to the system once it has stayed
// unused for a while.
#ifndef GPUSTREAM_SERVER_UTIL_HEAP_TRIMMER_H_
#define GPUSTREAM_SERVER_UTIL_HEAP_TRIMMER_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"

namespace gpustream::util {

// This process's resident memory in bytes (/proc/self/statm); 0 if
// unreadable.
uint64_t ResidentBytes();

// What one trim did.
struct HeapTrim {
  uint64_t resident_before = 0;
  uint64_t resident_after = 0;
  uint64_t in_use = 0;  // Heap in use after it.
};

// glibc keeps what threads free in their arenas, and returns it to the
// system only on a trim: a storm of calls abandoned while gRPC had them
// queued left the daemon hundreds of MB above its start with 10 MB in use.
// The trimmer watches the gap between the process's resident memory and
// the heap in use; when it has stayed kSlack above its floor (its lowest)
// for kQuietFor, a trim is due. Not thread-safe: one caller (the
// housekeeper).
class HeapTrimmer {
 public:
  // Small enough that a crowd of 10,000 sessions leaving (36 MB freed over
  // a 24 MB start) is given back.
  static constexpr uint64_t kSlack = 16ull << 20;
  static constexpr absl::Duration kQuietFor = absl::Seconds(1);
  // How often MaybeTrim reads the heap: mallinfo2 locks each arena and
  // walks its free lists, which other threads' mallocs wait for.
  static constexpr absl::Duration kCheckEvery = absl::Seconds(1);
  // A trim that gave back less than kSlack, and left the gap over the
  // threshold, waits twice as long as the one before it for the next (from
  // 2 s, up to this): the gap may be heap whose last chunks are still being
  // freed (a teardown in progress), which a later trim returns, or memory
  // no trim returns (mappings that are not heap, pages a live chunk holds).
  static constexpr absl::Duration kMaxBackoff = absl::Seconds(16);
  // Trims in a row that gave back less than kFutile: the gap is of the
  // second kind, and what the last one left becomes the floor (no more
  // trims for it). One that gives back more (a teardown still freeing)
  // does not count.
  static constexpr int kFutileTrims = 3;
  static constexpr uint64_t kFutile = 1ull << 20;

  // Reads the process's figures (at most every kCheckEvery) and trims when
  // due; what the trim did, if one was done.
  std::optional<HeapTrim> MaybeTrim(absl::Time now);

  // The policy, on given figures (tests): whether a trim is due at `now`
  // with `resident` bytes resident and `in_use` bytes of heap in use.
  bool Due(absl::Time now, uint64_t resident, uint64_t in_use);
  // A trim was done at `now`, and left these figures.
  void Trimmed(absl::Time now, uint64_t resident, uint64_t in_use);

 private:
  // Nothing over the threshold: no backoff, no futile trims counted.
  void Settle();

  bool have_floor_ = false;
  // The lowest gap seen, or what kFutileTrims futile trims in a row left.
  uint64_t floor_ = 0;
  uint64_t last_gap_ = 0;  // At the last Due().
  absl::Time over_since_ = absl::InfiniteFuture();
  absl::Time not_before_ = absl::InfinitePast();  // The backoff's end.
  absl::Duration backoff_ = kQuietFor;
  int futile_ = 0;  // Futile trims in a row.
  absl::Time last_check_ = absl::InfinitePast();
};

}  // namespace gpustream::util

#endif  // GPUSTREAM_SERVER_UTIL_HEAP_TRIMMER_H_
