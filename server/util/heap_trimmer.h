// Gives heap the allocator holds free back to the system once it has stayed
// unused for a while.
#ifndef GPUSTREAM_SERVER_UTIL_HEAP_TRIMMER_H_
#define GPUSTREAM_SERVER_UTIL_HEAP_TRIMMER_H_

#include <cstdint>

#include "absl/time/time.h"

namespace gpustream::util {

// This process's resident memory in bytes (/proc/self/statm); 0 if
// unreadable.
uint64_t ResidentBytes();

// glibc keeps what threads free in their arenas, and returns it to the
// system only on a trim: a storm of calls abandoned while gRPC had them
// queued left the daemon hundreds of MB above its start with 10 MB in use.
// The trimmer watches the gap between the process's resident memory and
// the heap in use; when it has stayed kSlack above its lowest for
// kQuietFor, it is due. Not thread-safe: one caller (the housekeeper).
class HeapTrimmer {
 public:
  // Small enough that a crowd of 10,000 sessions leaving (36 MB freed over
  // a 24 MB start) is given back. A trim that gives back less raises the
  // floor, so a heap that cannot shrink is not trimmed over and over.
  static constexpr uint64_t kSlack = 16ull << 20;
  static constexpr absl::Duration kQuietFor = absl::Seconds(1);
  // How often MaybeTrim reads the heap: mallinfo2 locks each arena and
  // walks its free lists, which other threads' mallocs wait for.
  static constexpr absl::Duration kCheckEvery = absl::Seconds(1);

  // Reads the process's figures (at most every kCheckEvery) and trims when
  // due; whether it trimmed.
  bool MaybeTrim(absl::Time now);

  // The policy, on given figures (tests): whether a trim is due at `now`
  // with `resident` bytes resident and `in_use` bytes of heap in use.
  bool Due(absl::Time now, uint64_t resident, uint64_t in_use);
  // A trim was done, and left these figures. One that gave back less than
  // kSlack makes what it left the new floor; one that gave back more keeps
  // the floor, so memory freed after a trim in the middle of a burst is
  // given back by the next.
  void Trimmed(uint64_t resident, uint64_t in_use);

 private:
  bool have_floor_ = false;
  uint64_t floor_ = 0;     // The lowest gap seen, or an unshrinkable one.
  uint64_t last_gap_ = 0;  // At the last Due().
  absl::Time over_since_ = absl::InfiniteFuture();
  absl::Time last_check_ = absl::InfinitePast();
};

}  // namespace gpustream::util

#endif  // GPUSTREAM_SERVER_UTIL_HEAP_TRIMMER_H_
