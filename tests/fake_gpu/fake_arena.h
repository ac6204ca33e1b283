// Device memory of the emulated GPU: one reserved range of address space
// per device that MemAlloc/MemAllocAsync carve allocations from, first
// fit, so that allocations lie next to each other as they do on a GPU, and a
// write past the end of one lands in whatever lives after it.
#ifndef TESTS_FAKE_GPU_FAKE_ARENA_H_
#define TESTS_FAKE_GPU_FAKE_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace fakegpu {

class Arena {
 public:
  // Device `device`'s arena, reserved on first use for `bytes` of
  // allocations (and page-aligned to `page`), or nullptr if the address
  // space cannot be reserved. Never destroyed: device work may run while
  // the process exits. Thread-safe.
  static Arena* For(int device, uint64_t bytes, size_t page);

  // A free range of `bytes` (a multiple of 256), first fit; 0 if none is
  // large enough. Its contents are whatever was there before (as on a GPU).
  uintptr_t Take(size_t bytes);
  // Gives back a range from Take.
  void Give(uintptr_t base, size_t bytes);

 private:
  Arena(uintptr_t begin, size_t size);

  std::mutex mu_;
  std::map<uintptr_t, size_t> free_;  // base -> size, coalesced; guarded
};

}  // namespace fakegpu

#endif  // TESTS_FAKE_GPU_FAKE_ARENA_H_
