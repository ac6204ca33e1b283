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

bool HeapTrimmer::MaybeTrim(absl::Time now) {
  if (now - last_check_ < kCheckEvery) return false;
  last_check_ = now;
  const uint64_t resident = ResidentBytes();
  if (resident == 0 || !Due(now, resident, HeapInUse())) return false;
  // Milliseconds; locks each arena in turn.
  malloc_trim(0);
  // Unreadable now: the floor stays (a gap of 0 would ask for trims).
  if (const uint64_t after = ResidentBytes(); after != 0) {
    Trimmed(after, HeapInUse());
  }
  return true;
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
  return now - over_since_ >= kQuietFor;
}

void HeapTrimmer::Trimmed(uint64_t resident, uint64_t in_use) {
  const uint64_t gap = Gap(resident, in_use);
  // What a trim could not give back (pages with a live chunk, memory that
  // is not heap) is not asked for again until the gap grows by kSlack more.
  if (gap + kSlack > last_gap_) floor_ = std::max(floor_, gap);
  have_floor_ = true;
  over_since_ = absl::InfiniteFuture();
}

}  // namespace gpustream::util
