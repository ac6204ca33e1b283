#include "server/util/heap_trimmer.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace gpustream::util {

uint64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;  // In pages.
  const int read = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (read != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

namespace {

// What is resident beyond the heap in use: code, stacks, mappings, and
// freed heap the allocator kept. Only the last moves by much.
uint64_t Gap(uint64_t resident, uint64_t in_use) {
  return resident > in_use ? resident - in_use : 0;
}

// Heap in use: allocated chunks in the arenas plus mmapped ones.
uint64_t HeapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

}  // namespace

std::optional<HeapTrim> HeapTrimmer::MaybeTrim(absl::Time now) {
  if (now - last_check_ < kCheckEvery) return std::nullopt;
  last_check_ = now;
  const uint64_t resident = ResidentBytes();
  if (resident == 0 || !Due(now, resident, HeapInUse())) return std::nullopt;
  // Milliseconds; locks each arena in turn.
  malloc_trim(0);
  HeapTrim trim{.resident_before = resident,
                .resident_after = ResidentBytes(),
                .in_use = HeapInUse()};
  // Unreadable now: taken as giving back nothing (a gap of 0 would read as
  // a trim that gave back everything).
  Trimmed(now, trim.resident_after == 0 ? resident : trim.resident_after,
          trim.in_use);
  return trim;
}

bool HeapTrimmer::Due(absl::Time now, uint64_t resident, uint64_t in_use) {
  const uint64_t gap = Gap(resident, in_use);
  last_gap_ = gap;
  // Heap in use over resident memory (calloc'd pages not yet touched, or
  // readings taken while other threads allocate) says nothing of the gap:
  // it must not lower the floor.
  if (!have_floor_ || (gap < floor_ && resident > in_use)) {
    have_floor_ = true;
    floor_ = gap;
  }
  if (gap < floor_ + kSlack) {
    Settle();
    return false;
  }
  // Over for a while: not memory about to be reused by a burst that is
  // still going on.
  if (over_since_ == absl::InfiniteFuture()) over_since_ = now;
  return now - over_since_ >= kQuietFor && now >= not_before_;
}

void HeapTrimmer::Trimmed(absl::Time now, uint64_t resident, uint64_t in_use) {
  const uint64_t gap = Gap(resident, in_use);
  const uint64_t gave = last_gap_ > gap ? last_gap_ - gap : 0;
  over_since_ = absl::InfiniteFuture();
  if (gap < floor_ + kSlack || gave >= kSlack) {
    Settle();
    return;
  }
  futile_ = gave < kFutile ? futile_ + 1 : 0;
  if (futile_ >= kFutileTrims) {
    floor_ = gap;
    Settle();
    return;
  }
  backoff_ = std::min(2 * backoff_, kMaxBackoff);
  not_before_ = now + backoff_;
}

void HeapTrimmer::Settle() {
  over_since_ = absl::InfiniteFuture();
  backoff_ = kQuietFor;
  not_before_ = absl::InfinitePast();
  futile_ = 0;
}

}  // namespace gpustream::util
