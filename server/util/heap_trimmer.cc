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
  if (!have_floor_ || gap < floor_) {
    have_floor_ = true;
    floor_ = gap;
  }
  if (gap < floor_ + kSlack) {
    over_since_ = absl::InfiniteFuture();
    return false;
  }
  // Over for a while: not memory about to be reused by a burst that is
  // still going on.
  if (over_since_ == absl::InfiniteFuture()) over_since_ = now;
  return now - over_since_ >= kQuietFor && now >= not_before_;
}

void HeapTrimmer::Trimmed(absl::Time now, uint64_t resident, uint64_t in_use) {
  const uint64_t gap = Gap(resident, in_use);
  const bool gave_back = gap + kSlack <= last_gap_ || gap < floor_ + kSlack;
  backoff_ = gave_back ? kQuietFor : std::min(2 * backoff_, kMaxBackoff);
  not_before_ = now + backoff_;
  over_since_ = absl::InfiniteFuture();
}

}  // namespace gpustream::util
