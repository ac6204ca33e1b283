// The emulated GPU's device address space (fake_arena.h).
#include "tests/fake_gpu/fake_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <iterator>

namespace fakegpu {
namespace {

constexpr int kMaxDevices = 64;                     // FAKEGPU_DEVICES' bound
constexpr uint64_t kMaxArena = uint64_t{64} << 30;  // address space per device

}  // namespace

Arena::Arena(uintptr_t begin, size_t size) { free_.emplace(begin, size); }

Arena* Arena::For(int device, uint64_t bytes, size_t page) {
  static std::mutex mu;
  static Arena* arenas[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (arenas[device] == nullptr) {
    // Room for the device's memory, page-aligned, plus a page: never more
    // than kMaxArena of address space (reserved, not committed).
    const uint64_t size =
        (std::min(bytes, kMaxArena) + page - 1) / page * page + page;
    void* p = mmap(nullptr, size + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    const uintptr_t begin =
        (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    arenas[device] = new Arena(begin, size);
  }
  return arenas[device];
}

uintptr_t Arena::Take(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const uintptr_t base = it->first;
    const size_t rest = it->second - bytes;
    free_.erase(it);
    if (rest > 0) free_.emplace(base + bytes, rest);
    return base;
  }
  return 0;
}

void Arena::Give(uintptr_t base, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.emplace(base, bytes).first;
  // Coalesce with the following and the preceding free range.
  if (auto next = std::next(it);
      next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

}  // namespace fakegpu
