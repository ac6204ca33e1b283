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

// What a trim could not give back is not asked for again until the gap
// grows by the slack once more.
TEST(HeapTrimmerTest, WhatATrimLeftIsTheNewFloor) {
  HeapTrimmer trimmer;
  EXPECT_FALSE(trimmer.Due(kStart, 50 * kMiB, 10 * kMiB));
  EXPECT_FALSE(trimmer.Due(kStart, 400 * kMiB, 10 * kMiB));
  ASSERT_TRUE(trimmer.Due(kStart + absl::Seconds(1), 400 * kMiB, 10 * kMiB));
  trimmer.Trimmed(390 * kMiB, 10 * kMiB);  // Gave back 10 MB: floor 380.
  EXPECT_FALSE(trimmer.Due(kStart + absl::Seconds(5), 390 * kMiB, 10 * kMiB));
  EXPECT_FALSE(trimmer.Due(kStart + absl::Seconds(9), 400 * kMiB, 10 * kMiB));
  EXPECT_FALSE(trimmer.Due(kStart + absl::Seconds(10), 410 * kMiB, 10 * kMiB));
  EXPECT_TRUE(trimmer.Due(kStart + absl::Seconds(11), 410 * kMiB, 10 * kMiB));
}

// A trim that gave back a lot keeps the floor: what the burst frees after
// it (the trim came in its middle) is given back by the next one.
TEST(HeapTrimmerTest, AnEffectiveTrimKeepsTheFloor) {
  HeapTrimmer trimmer;
  EXPECT_FALSE(trimmer.Due(kStart, 50 * kMiB, 10 * kMiB));  // Floor: 40.
  EXPECT_FALSE(trimmer.Due(kStart, 400 * kMiB, 10 * kMiB));
  ASSERT_TRUE(trimmer.Due(kStart + absl::Seconds(1), 400 * kMiB, 10 * kMiB));
  trimmer.Trimmed(100 * kMiB, 10 * kMiB);  // Gave back 300 MB.
  EXPECT_FALSE(trimmer.Due(kStart + absl::Seconds(2), 100 * kMiB, 10 * kMiB));
  EXPECT_TRUE(trimmer.Due(kStart + absl::Seconds(3), 100 * kMiB, 10 * kMiB));
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
  EXPECT_TRUE(trimmer.MaybeTrim(kStart + absl::Seconds(2)));
  // The sanitizers' allocators are not glibc's: nothing to give back there.
#if defined(__SANITIZE_ADDRESS__)
  const bool sanitized = true;
#else
  const bool sanitized = std::getenv("GPUSTREAM_TSAN") != nullptr;
#endif
  if (!sanitized) {
    EXPECT_LT(ResidentBytes() + 64 * kMiB, freed)
        << "the trim gave nothing back: " << (freed >> 10) << " kB before";
  }
  EXPECT_FALSE(trimmer.MaybeTrim(kStart + absl::Seconds(3)));
  EXPECT_FALSE(trimmer.MaybeTrim(kStart + absl::Seconds(4)))
      << "trimmed again with nothing freed";
}

}  // namespace
}  // namespace gpustream::util
