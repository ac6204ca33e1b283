// Memory of the emulated GPU: "device" memory (MemAlloc) and pinned
// host memory (MemHostAlloc) are host allocations, and a DevicePtr is
// the host address (unified addressing). One process-wide table of live
// allocations bounds-checks every access that emulated device work makes.
#ifndef TESTS_FAKE_GPU_FAKE_MEMORY_H_
#define TESTS_FAKE_GPU_FAKE_MEMORY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tests/fake_gpu/fake_arena.h"
#include "tests/fake_gpu/fake_context.h"
#include "tests/fake_gpu/fake_gpu.h"

namespace fakegpu {

// One allocation. Its storage is freed when the last holder drops it, so
// device work that holds it while accessing it can never touch freed
// memory; `live` turns false when MemFree/MemFreeHost or context
// destruction removes it from the table.
struct Allocation {
  Allocation(uintptr_t base, size_t size, size_t reserved, bool pinned,
             unsigned flags, const Context* owner)
      : base(base),
        size(size),
        reserved(reserved),
        pinned(pinned),
        flags(flags),
        owner(owner) {}
  ~Allocation();
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  const uintptr_t base;
  const size_t size;           // as requested: accesses beyond it fault
  const size_t reserved;       // rounded up to the alignment; counted in use
  const bool pinned;           // from MemHostAlloc
  const unsigned flags;        // MemHostAlloc's flags
  const Context* const owner;  // identity only; never dereferenced
  std::atomic<bool> live{true};
  // False from MemAllocAsync until its stream reaches the allocation:
  // device work that touches it before then faults (stream order is the
  // only thing that makes pool memory usable).
  std::atomic<bool> available{true};
  // The device arena the storage came from (device memory with
  // Config::page_bytes), or null (aligned_alloc). Set before it is shared.
  Arena* arena = nullptr;
  // The storage is the caller's (MemHostRegister): never freed here. Set
  // before it is shared.
  bool registered = false;
};

// Who may access a range.
enum class Access {
  kContext,  // device work of a context: its device memory, any pinned
  kAny,      // copies (unified addressing): any live allocation
};

// The live allocation that holds all of [addr, addr + len) (len >= 1) and
// that `ctx` may access under `access`; nullptr if there is none.
// Thread-safe.
std::shared_ptr<Allocation> FindAllocation(const Context& ctx, uintptr_t addr,
                                           size_t len, Access access);

// The pinned allocation that holds `p`, or nullptr. Thread-safe.
std::shared_ptr<Allocation> FindPinned(const void* p);

// An access by a kernel running in `ctx`, as a GPU checks it: DeviceAccess's
// answer when [addr, addr + len) lies in one allocation; else, with
// Config::page_bytes, Result::kSuccess (and a null *hold) if every granule the
// range touches holds device memory of ctx: the access lands in whatever
// lives there, another allocation's data included.
Result KernelAccess(const Context& ctx, uintptr_t addr, size_t len,
                    size_t align, std::shared_ptr<Allocation>* hold);

// An access by device work running in `ctx`: Result::kSuccess with the
// allocation in *hold (keep it while accessing), or the fault:
// Result::kMisalignedAddress if addr is not a multiple of `align`,
// Result::kIllegalAddress if [addr, addr + len) is not inside one live
// allocation that ctx may access. len == 0 accesses nothing and succeeds.
Result DeviceAccess(const Context& ctx, uintptr_t addr, size_t len,
                    size_t align, Access access,
                    std::shared_ptr<Allocation>* hold);

}  // namespace fakegpu

#endif  // TESTS_FAKE_GPU_FAKE_MEMORY_H_
