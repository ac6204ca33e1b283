#include "server/util/heap_trimmer.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace gpustream::util {
namespace {

constexpr uint64_t kMiB = 1 << 20;

const absl::Time kStart = absl::FromUnixSeconds(1000);

// The first time after `from`, in steps of 250 ms up to a minute, at which
// a trim is due with these figures; absl::InfiniteFuture() if none is.
absl::Time NextDue(HeapTrimmer& trimmer, absl::Time from, uint64_t resident,
                   uint64_t in_use) {
  for (absl::Time now = from + absl::Milliseconds(250);
       now - from <= absl::Minutes(1); now += absl::Milliseconds(250)) {
    if (trimmer.Due(now, resident, in_use)) return now;
  }
  return absl::InfiniteFuture();
}

// Freed heap kept past the slack for the quiet period is due; not before.
TEST(HeapTrimmerTest, DueOnceTheGapHasStayedAboveTheSlack) {
  HeapTrimmer trimmer;
  EXPECT_FALSE(trimmer.Due(kStart, 50 * kMiB, 10 * kMiB));  // Floor: 40.
  EXPECT_FALSE(trimmer.Due(kStart, 60 * kMiB, 10 * kMiB));  // Within slack.
  const absl::Time t1 = kStart + absl::Seconds(1);
  EXPECT_FALSE(trimmer.Due(t1, 400 * kMiB, 10 * kMiB));  // Over, from now.
  EXPECT_FALSE(
      trimmer.Due(t1 + absl::Milliseconds(500), 400 * kMiB, 10 * kMiB));
  EXPECT_TRUE(trimmer.Due(t1 + HeapTrimmer::kQuietFor, 400 * kMiB, 10 * kMiB));
}

// A burst that reuses its memory (the gap falls back) starts the quiet
// period over.
TEST(HeapTrimmerTest, AGapThatFallsBackStartsOver) {
  HeapTrimmer trimmer;
  EXPECT_FALSE(trimmer.Due(kStart, 50 * kMiB, 10 * kMiB));
  EXPECT_FALSE(trimmer.Due(kStart, 400 * kMiB, 10 * kMiB));
  EXPECT_FALSE(
      trimmer.Due(kStart + absl::Milliseconds(900), 400 * kMiB, 350 * kMiB));
  EXPECT_FALSE(
      trimmer.Due(kStart + absl::Milliseconds(1500), 400 * kMiB, 10 * kMiB));
  EXPECT_TRUE(
      trimmer.Due(kStart + absl::Milliseconds(2500), 400 * kMiB, 10 * kMiB));
}

// A burst freed part of its heap, a trim in its middle could give back
// little (live chunks pinned the pages), then the burst freed the rest: less
// than the slack more, but now all of it can go. The trimmer tries again,
// within its backoff. (It once took what the first trim left as its floor,
// and kept a crowd's 37 MB for good.)
TEST(HeapTrimmerTest, MemoryFreedAfterATrimThatGaveBackLittleIsGivenBack) {
  HeapTrimmer trimmer;
  EXPECT_FALSE(trimmer.Due(kStart, 50 * kMiB, 10 * kMiB));   // Floor: 40.
  EXPECT_FALSE(trimmer.Due(kStart, 120 * kMiB, 40 * kMiB));  // Gap 80.
  const absl::Time t = kStart + absl::Seconds(1);
  ASSERT_TRUE(trimmer.Due(t, 120 * kMiB, 40 * kMiB));
  trimmer.Trimmed(t, 115 * kMiB, 40 * kMiB);  // Gave back 5: gap 75.
  // The rest is freed: the gap grows by 10, less than the slack.
  const absl::Time retried = NextDue(trimmer, t, 115 * kMiB, 30 * kMiB);
  EXPECT_LE(retried, t + HeapTrimmer::kMaxBackoff);
  EXPECT_GE(retried, t + 2 * HeapTrimmer::kQuietFor) << "no backoff";
}

// Trims that give back little, while more is freed between them (a long
// teardown), come less and less often, down to one per kMaxBackoff.
TEST(HeapTrimmerTest, TrimsThatGiveBackLittleBackOff) {
  HeapTrimmer trimmer;
  EXPECT_FALSE(trimmer.Due(kStart, 50 * kMiB, 10 * kMiB));  // Floor: 40.
  EXPECT_FALSE(trimmer.Due(kStart, 400 * kMiB, 10 * kMiB));
  absl::Time now = kStart + absl::Seconds(1);
  ASSERT_TRUE(trimmer.Due(now, 400 * kMiB, 10 * kMiB));
  std::vector<absl::Duration> waits;
  for (int trims = 0; trims < 6; ++trims) {
    trimmer.Trimmed(now, 390 * kMiB, 10 * kMiB);  // Gave back 10.
    const absl::Time trimmed = now;
    now = NextDue(trimmer, trimmed, 400 * kMiB, 10 * kMiB);  // 10 MB freed.
    ASSERT_NE(now, absl::InfiniteFuture());
    waits.push_back(now - trimmed);
  }
  const std::vector<absl::Duration> expected = {
      absl::Seconds(2),  absl::Seconds(4),  absl::Seconds(8),
      absl::Seconds(16), absl::Seconds(16), absl::Seconds(16)};
  EXPECT_EQ(waits, expected);
}

// Trims that give back nothing at all (memory that is not heap) stop after
// kFutileTrims: what they left is the floor. A gap that grows by the slack
// over it is due again.
TEST(HeapTrimmerTest, FutileTrimsMakeWhatTheyLeftTheFloor) {
  HeapTrimmer trimmer;
  EXPECT_FALSE(trimmer.Due(kStart, 50 * kMiB, 10 * kMiB));  // Floor: 40.
  EXPECT_FALSE(trimmer.Due(kStart, 400 * kMiB, 10 * kMiB));
  absl::Time now = kStart + absl::Seconds(1);
  ASSERT_TRUE(trimmer.Due(now, 400 * kMiB, 10 * kMiB));
  int trims = 0;
  for (absl::Time due = now; due != absl::InfiniteFuture();
       due = NextDue(trimmer, now, 400 * kMiB, 10 * kMiB)) {
    now = due;
    trimmer.Trimmed(now, 400 * kMiB, 10 * kMiB);  // Gave back nothing.
    ++trims;
  }
  EXPECT_EQ(trims, HeapTrimmer::kFutileTrims);
  EXPECT_FALSE(
      trimmer.Due(now, 400 * kMiB + HeapTrimmer::kSlack / 2, 10 * kMiB));
  EXPECT_FALSE(trimmer.Due(now, 400 * kMiB + HeapTrimmer::kSlack, 10 * kMiB));
  EXPECT_TRUE(trimmer.Due(now + absl::Seconds(1),
                          400 * kMiB + HeapTrimmer::kSlack, 10 * kMiB));
}

// Heap in use above resident memory (calloc'd pages not touched yet, or
// figures read while other threads allocate) does not lower the floor: the
// gap's usual size after it is not taken for freed heap.
TEST(HeapTrimmerTest, HeapInUseAboveResidentLeavesTheFloor) {
  HeapTrimmer trimmer;
  EXPECT_FALSE(trimmer.Due(kStart, 50 * kMiB, 10 * kMiB));    // Floor: 40.
  EXPECT_FALSE(trimmer.Due(kStart, 60 * kMiB, 1024 * kMiB));  // Untouched.
  EXPECT_FALSE(trimmer.Due(kStart + absl::Seconds(5), 50 * kMiB, 10 * kMiB));
  EXPECT_FALSE(trimmer.Due(kStart + absl::Seconds(9), 50 * kMiB, 10 * kMiB));
}

// A trim that gave back a lot keeps the floor and ends the backoff: what a
// burst frees after it (the trim came in its middle) is given back by the
// next one, a quiet period later.
TEST(HeapTrimmerTest, AnEffectiveTrimKeepsTheFloorAndEndsTheBackoff) {
  HeapTrimmer trimmer;
  EXPECT_FALSE(trimmer.Due(kStart, 50 * kMiB, 10 * kMiB));  // Floor: 40.
  EXPECT_FALSE(trimmer.Due(kStart, 400 * kMiB, 10 * kMiB));
  absl::Time now = kStart + absl::Seconds(1);
  ASSERT_TRUE(trimmer.Due(now, 400 * kMiB, 10 * kMiB));
  trimmer.Trimmed(now, 395 * kMiB, 10 * kMiB);  // Little: backoff 2 s.
  now += absl::Seconds(2);
  EXPECT_FALSE(trimmer.Due(now, 395 * kMiB, 10 * kMiB));
  now += absl::Seconds(1);
  ASSERT_TRUE(trimmer.Due(now, 395 * kMiB, 10 * kMiB));
  trimmer.Trimmed(now, 100 * kMiB, 10 * kMiB);  // Gave back 295 MB.
  EXPECT_FALSE(trimmer.Due(now + absl::Seconds(1), 100 * kMiB, 10 * kMiB));
  EXPECT_TRUE(trimmer.Due(now + absl::Seconds(2), 100 * kMiB, 10 * kMiB));
}

// The process's own figures: a trim after freeing a large, touched heap
// gives memory back, and says so.
TEST(HeapTrimmerTest, MaybeTrimReadsTheProcess) {
  HeapTrimmer trimmer;
  EXPECT_FALSE(trimmer.MaybeTrim(kStart));  // Sets the floor.
  std::unique_ptr<char[]> pin;
  {
    // 128 MiB of small blocks (below the mmap threshold: heap), then one
    // kept above them, so that free() cannot shrink the heap from its top.
    std::vector<std::unique_ptr<char[]>> blocks;
    for (int i = 0; i < 128 * 16; ++i) {
      blocks.emplace_back(new char[64 << 10]);
      std::fill_n(blocks.back().get(), 64 << 10, static_cast<char>(i));
    }
    pin.reset(new char[100 << 10]);  // Larger than any freed chunk: the top.
    std::fill_n(pin.get(), 100 << 10, 1);
  }
  const uint64_t freed = ResidentBytes();
  EXPECT_FALSE(trimmer.MaybeTrim(kStart + absl::Seconds(1)));
  EXPECT_FALSE(trimmer.MaybeTrim(kStart + absl::Milliseconds(1500)))
      << "checked again within kCheckEvery";
  const std::optional<HeapTrim> trim =
      trimmer.MaybeTrim(kStart + absl::Seconds(2));
  ASSERT_TRUE(trim.has_value());
  // Read a moment apart: pages may come and go in between.
  EXPECT_NEAR(static_cast<double>(trim->resident_before),
              static_cast<double>(freed), 8.0 * kMiB);
  // The sanitizers' allocators are not glibc's: nothing to give back there.
#if defined(__SANITIZE_ADDRESS__)
  const bool sanitized = true;
#else
  const bool sanitized = std::getenv("GPUSTREAM_TSAN") != nullptr;
#endif
  if (!sanitized) {
    EXPECT_LT(ResidentBytes() + 64 * kMiB, freed)
        << "the trim gave nothing back: " << (freed >> 10) << " kB before";
    EXPECT_FALSE(trimmer.MaybeTrim(kStart + absl::Seconds(3)));
    EXPECT_FALSE(trimmer.MaybeTrim(kStart + absl::Seconds(4)))
        << "trimmed again with nothing freed";
  }
}

}  // namespace
}  // namespace gpustream::util
