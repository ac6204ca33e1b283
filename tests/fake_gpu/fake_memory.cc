// Memory of the emulated GPU: allocation, the table of live
// allocations, and the asynchronous copies and memset, which run in stream
// order and check their ranges both when enqueued (Result::kInvalidValue,
// as the driver validates pointers) and when run (a fault if the memory was
// freed meanwhile).
#include "tests/fake_gpu/fake_memory.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tests/fake_gpu/fake_gpu.h"
#include "tests/fake_gpu/fake_graph.h"
#include "tests/fake_gpu/fake_stream.h"

namespace fakegpu {
namespace {

constexpr size_t kDeviceAlignment = 256;   // MemAlloc's guarantee
constexpr size_t kPinnedAlignment = 4096;  // page-aligned, like CUDA's

// All live allocations by base address, and device memory in use per
// context. Never destroyed: stream workers may outlive static destructors.
struct Table {
  std::mutex mu;
  std::map<uintptr_t, std::shared_ptr<Allocation>> by_base;
  std::unordered_map<const Context*, uint64_t> device_bytes;
};

Table& table() {
  static Table* t = new Table;
  return *t;
}

// The allocation holding [addr, addr + len), or nullptr. Requires table().mu.
std::shared_ptr<Allocation> FindLocked(Table& t, uintptr_t addr, size_t len) {
  auto it = t.by_base.upper_bound(addr);
  if (it == t.by_base.begin()) return nullptr;
  --it;
  const Allocation& a = *it->second;
  const uintptr_t offset = addr - a.base;
  if (offset >= a.size || len > a.size - offset) return nullptr;
  return it->second;
}

bool MayAccess(const Context& ctx, const Allocation& a, Access access) {
  return access == Access::kAny || a.pinned || a.owner == &ctx;
}

// Rounds `size` up to a multiple of `align`; false on overflow.
bool RoundUp(size_t size, size_t align, size_t* rounded) {
  if (size > SIZE_MAX - (align - 1)) return false;
  *rounded = (size + align - 1) / align * align;
  return true;
}

// Registers a new allocation of `ctx`: device memory counted against
// `limit` (Result::kOutOfMemory beyond it), or pinned host memory, not
// counted but refused past `limit` in one piece, as a real driver refuses
// more than the host can pin (and a sanitizer's allocator would abort the
// process on an impossible size rather than return null).
Result Allocate(const Context& ctx, size_t size, bool pinned, unsigned flags,
                uint64_t limit, uintptr_t* base) {
  size_t rounded;
  if (size == 0 ||
      !RoundUp(size, pinned ? kPinnedAlignment : kDeviceAlignment, &rounded)) {
    return Result::kInvalidValue;
  }
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (ctx.destroyed()) return Result::kContextIsDestroyed;
  uint64_t& used = t.device_bytes[&ctx];
  if (!pinned && rounded > limit - used) return Result::kOutOfMemory;
  if (pinned && rounded > limit) return Result::kOutOfMemory;
  Arena* arena = nullptr;
  const uint64_t page = GetConfig()->page_bytes;
  if (!pinned && page != 0) {
    arena = Arena::For(ctx.device(), limit, page);
    *base = arena != nullptr ? arena->Take(rounded) : 0;
  } else {
    *base = reinterpret_cast<uintptr_t>(std::aligned_alloc(
        pinned ? kPinnedAlignment : kDeviceAlignment, rounded));
  }
  if (*base == 0) return Result::kOutOfMemory;
  auto allocation =
      std::make_shared<Allocation>(*base, size, rounded, pinned, flags, &ctx);
  allocation->arena = arena;
  t.by_base.emplace(*base, std::move(allocation));
  if (!pinned) used += rounded;
  return Result::kSuccess;
}

// Frees the allocation based at `base` of the given kind (any context's;
// `registered`: MemHostRegister's); `missing` if there is none. Work that
// still uses it faults when it runs.
Result Free(uintptr_t base, bool pinned, bool registered = false,
            Result missing = Result::kInvalidValue) {
  std::shared_ptr<Allocation> freed;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.by_base.find(base);
  if (it == t.by_base.end() || it->second->pinned != pinned ||
      it->second->registered != registered) {
    return missing;
  }
  freed = std::move(it->second);
  t.by_base.erase(it);
  freed->live.store(false);
  if (!pinned) t.device_bytes[freed->owner] -= freed->reserved;
  return Result::kSuccess;
}

// Whether [addr, addr + len) is inside one live allocation (with unified
// addressing a copy may use any context's memory).
bool Valid(const Stream& stream, uintptr_t addr, size_t len) {
  return FindAllocation(stream.ctx(), addr, len, Access::kAny) != nullptr;
}

// Whether [addr, addr + len) is inside pinned memory, for copies to and
// from the host.
bool Pinned(const Stream& stream, uintptr_t addr, size_t len) {
  std::shared_ptr<Allocation> a =
      FindAllocation(stream.ctx(), addr, len, Access::kAny);
  return a != nullptr && a->pinned;
}

}  // namespace

Allocation::~Allocation() {
  if (registered) return;
  if (arena != nullptr) {
    arena->Give(base, reserved);
  } else {
    std::free(reinterpret_cast<void*>(base));
  }
}

std::shared_ptr<Allocation> FindAllocation(const Context& ctx, uintptr_t addr,
                                           size_t len, Access access) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::shared_ptr<Allocation> a = FindLocked(t, addr, len == 0 ? 1 : len);
  return a != nullptr && MayAccess(ctx, *a, access) ? a : nullptr;
}

std::shared_ptr<Allocation> FindPinned(const void* p) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::shared_ptr<Allocation> a =
      FindLocked(t, reinterpret_cast<uintptr_t>(p), 1);
  return a != nullptr && a->pinned ? a : nullptr;
}

Result DeviceAccess(const Context& ctx, uintptr_t addr, size_t len,
                    size_t align, Access access,
                    std::shared_ptr<Allocation>* hold) {
  if (len == 0) return Result::kSuccess;
  if (addr % align != 0) return Result::kMisalignedAddress;
  *hold = FindAllocation(ctx, addr, len, access);
  return *hold != nullptr && (*hold)->available.load()
             ? Result::kSuccess
             : Result::kIllegalAddress;
}

namespace {
std::atomic<uint64_t> g_stray_accesses{0};
}  // namespace

Result KernelAccess(const Context& ctx, uintptr_t addr, size_t len,
                    size_t align, std::shared_ptr<Allocation>* hold) {
  const Result exact =
      DeviceAccess(ctx, addr, len, align, Access::kContext, hold);
  if (exact != Result::kIllegalAddress) return exact;
  hold->reset();
  const uint64_t page = GetConfig()->page_bytes;
  if (page == 0 || addr + len < addr) return Result::kIllegalAddress;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (uintptr_t granule = addr / page * page; granule < addr + len;
       granule += page) {
    // Allocations do not overlap: walking back from the last one that
    // starts before the granule's end, the first that ends before its
    // start ends the search.
    bool mapped = false;
    for (auto it = t.by_base.lower_bound(granule + page);
         !mapped && it != t.by_base.begin();) {
      const Allocation& a = *(--it)->second;
      if (a.base + a.reserved <= granule) break;
      mapped = a.arena != nullptr && a.owner == &ctx && a.available.load();
    }
    if (!mapped) return Result::kIllegalAddress;
    if (granule + page < granule) break;
  }
  g_stray_accesses.fetch_add(1, std::memory_order_relaxed);
  return Result::kSuccess;
}

uint64_t StrayAccesses() {
  return g_stray_accesses.load(std::memory_order_relaxed);
}

void ReleaseMemory(const Context* ctx) {
  std::vector<std::shared_ptr<Allocation>> freed;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto it = t.by_base.begin(); it != t.by_base.end();) {
    if (it->second->owner == ctx) {
      it->second->live.store(false);
      freed.push_back(std::move(it->second));
      it = t.by_base.erase(it);
    } else {
      ++it;
    }
  }
  t.device_bytes.erase(ctx);
}

// Device memory: host memory aligned to 256 bytes, counted against
// FAKEGPU_MEMORY_BYTES per device (rounded up to 256 bytes).
Result MemAlloc(DevicePtr* dptr, size_t bytesize) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (dptr == nullptr) return Result::kInvalidValue;
  if (Result r = CheckCaptureSafe(); r != Result::kSuccess) return r;
  uintptr_t base;
  if (Result r =
          Allocate(*ctx, bytesize, false, 0, GetConfig()->memory_bytes, &base);
      r != Result::kSuccess) {
    return r;
  }
  *dptr = base;
  return Result::kSuccess;
}

// As documented, MemFree synchronizes: it returns once all work enqueued
// on the context so far has finished (Config::sync_free). A stream parked
// on a wait that nothing will satisfy makes it hang, as on a GPU.
Result MemFree(DevicePtr dptr) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kIgnore, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (Result r = CheckCaptureSafe(); r != Result::kSuccess) return r;
  if (GetConfig()->sync_free) {
    if (Result r = CheckNoCaptureIn(*ctx); r != Result::kSuccess) return r;
    DrainContext(*ctx);
  }
  return Free(dptr, false);
}

// Stream-ordered allocation from the device's default pool: the address is
// returned at once, but the memory is usable only by work ordered after
// the allocation on `hStream` (earlier or unordered device access faults).
Result MemAllocAsync(DevicePtr* dptr, size_t bytesize, StreamHandle hStream) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(hStream, false, &stream);
      r != Result::kSuccess) {
    return r;
  }
  if (dptr == nullptr) return Result::kInvalidValue;
  uintptr_t base;
  if (Result r = Allocate(stream->ctx(), bytesize, false, 0,
                          GetConfig()->memory_bytes, &base);
      r != Result::kSuccess) {
    return r;
  }
  std::shared_ptr<Allocation> a =
      FindAllocation(stream->ctx(), base, 1, Access::kContext);
  a->available.store(false);
  if (Result r = EnqueueOp(*stream,
                           [a](Stream&) {
                             a->available.store(true);
                             return Result::kSuccess;
                           });
      r != Result::kSuccess) {
    Free(base, false);
    return r;
  }
  *dptr = base;
  return Result::kSuccess;
}

// Stream-ordered free: the memory goes when `hStream` reaches it, without
// synchronizing anything; work that uses it later faults.
Result MemFreeAsync(DevicePtr dptr, StreamHandle hStream) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(hStream, false, &stream);
      r != Result::kSuccess) {
    return r;
  }
  std::shared_ptr<Allocation> a =
      FindAllocation(stream->ctx(), dptr, 1, Access::kAny);
  if (a == nullptr || a->base != dptr || a->pinned) {
    return Result::kInvalidValue;
  }
  return EnqueueOp(*stream, [dptr](Stream&) {
    Free(dptr, false);
    return Result::kSuccess;
  });
}

// Pinned memory, page-aligned, not counted as device memory. It belongs to
// the calling context (freed when that context is destroyed) and, with
// unified addressing, is accessible to every context at the same address.
Result MemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  constexpr unsigned kKnown =
      kHostAllocPortable | kHostAllocDevicemap | kHostAllocWritecombined;
  if (pp == nullptr || (Flags & ~kKnown) != 0) return Result::kInvalidValue;
  if (Result r = CheckCaptureSafe(); r != Result::kSuccess) return r;
  uintptr_t base;
  if (Result r = Allocate(*ctx, bytesize, true, Flags,
                          GetConfig()->memory_bytes, &base);
      r != Result::kSuccess) {
    return r;
  }
  *pp = reinterpret_cast<void*>(base);
  return Result::kSuccess;
}

// Synchronizes the context, as MemFree does.
Result MemFreeHost(void* p) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kIgnore, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (Result r = CheckCaptureSafe(); r != Result::kSuccess) return r;
  if (GetConfig()->sync_free) {
    if (Result r = CheckNoCaptureIn(*ctx); r != Result::kSuccess) return r;
    DrainContext(*ctx);
  }
  return Free(reinterpret_cast<uintptr_t>(p), true);
}

Result MemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  constexpr unsigned kKnown = kHostRegisterPortable | kHostRegisterDevicemap |
                              kHostRegisterIoMemory | kHostRegisterReadOnly;
  if (p == nullptr || bytesize == 0 || (Flags & ~kKnown) != 0) {
    return Result::kInvalidValue;
  }
  if ((Flags & (kHostRegisterIoMemory | kHostRegisterReadOnly)) != 0) {
    return Result::kNotSupported;
  }
  // More than the host can pin in one piece, as MemHostAlloc refuses it.
  if (bytesize > GetConfig()->memory_bytes) return Result::kOutOfMemory;
  if (Result r = CheckCaptureSafe(); r != Result::kSuccess) return r;
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  if (bytesize > UINTPTR_MAX - base) return Result::kInvalidValue;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (ctx->destroyed()) return Result::kContextIsDestroyed;
  // Any live allocation overlapping the range: pinned memory is registered
  // already; "device" memory of the emulation is host memory too, and a
  // range that reaches into it is not the caller's to register.
  auto next = t.by_base.lower_bound(base);
  if (next != t.by_base.end() && next->first < base + bytesize) {
    return Result::kHostMemoryAlreadyRegistered;
  }
  if (next != t.by_base.begin() &&
      std::prev(next)->first + std::prev(next)->second->reserved > base) {
    return Result::kHostMemoryAlreadyRegistered;
  }
  auto allocation = std::make_shared<Allocation>(base, bytesize, bytesize, true,
                                                 Flags, ctx.get());
  allocation->registered = true;
  t.by_base.emplace(base, std::move(allocation));
  return Result::kSuccess;
}

// Synchronizes the context, as MemFreeHost does.
Result MemHostUnregister(void* p) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kIgnore, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (p == nullptr) return Result::kInvalidValue;
  if (Result r = CheckCaptureSafe(); r != Result::kSuccess) return r;
  if (GetConfig()->sync_free) {
    if (Result r = CheckNoCaptureIn(*ctx); r != Result::kSuccess) return r;
    DrainContext(*ctx);
  }
  return Free(reinterpret_cast<uintptr_t>(p), true, /*registered=*/true,
              Result::kHostMemoryNotRegistered);
}

// The device address is the host address. As documented, the memory must
// come from MemHostAlloc with kHostAllocDevicemap (or MemHostRegister with
// kHostRegisterDevicemap), and Flags be 0.
Result MemHostGetDevicePointer(DevicePtr* pdptr, void* p, unsigned int Flags) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (pdptr == nullptr || Flags != 0) return Result::kInvalidValue;
  std::shared_ptr<Allocation> a = FindPinned(p);
  if (a == nullptr || (a->flags & kHostAllocDevicemap) == 0) {
    return Result::kInvalidValue;
  }
  *pdptr = reinterpret_cast<DevicePtr>(p);
  return Result::kSuccess;
}

Result MemGetInfo(size_t* free, size_t* total) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (free == nullptr || total == nullptr) return Result::kInvalidValue;
  const uint64_t limit = GetConfig()->memory_bytes;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.device_bytes.find(ctx.get());
  *free = limit - (it == t.device_bytes.end() ? 0 : it->second);
  *total = limit;
  return Result::kSuccess;
}

// From pinned memory the copy reads the source when the stream runs it;
// from pageable memory the source is staged at once, as CUDA does, so the
// caller may reuse its buffer on return.
Result MemcpyHtoDAsync(DevicePtr dst, const void* src, size_t n,
                       StreamHandle hStream) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(hStream, false, &stream);
      r != Result::kSuccess)
    return r;
  if (n == 0) return Result::kSuccess;
  const auto from = reinterpret_cast<uintptr_t>(src);
  if (src == nullptr || !Valid(*stream, dst, n)) {
    return Result::kInvalidValue;
  }
  std::shared_ptr<std::vector<char>> staged;
  if (!Pinned(*stream, from, n)) {
    const char* bytes = static_cast<const char*>(src);
    staged = std::make_shared<std::vector<char>>(bytes, bytes + n);
  }
  // Captured only from pinned memory: a graph cannot stage pageable bytes.
  Op copy = [dst, from, n, staged](Stream& s) -> Result {
    std::shared_ptr<Allocation> to_hold;
    std::shared_ptr<Allocation> from_hold;
    if (Result r = DeviceAccess(s.ctx(), dst, n, 1, Access::kAny, &to_hold);
        r != Result::kSuccess) {
      return r;
    }
    if (staged == nullptr) {
      if (Result r =
              DeviceAccess(s.ctx(), from, n, 1, Access::kAny, &from_hold);
          r != Result::kSuccess) {
        return r;
      }
    }
    std::memmove(reinterpret_cast<void*>(dst),
                 staged != nullptr ? staged->data()
                                   : reinterpret_cast<const void*>(from),
                 n);
    return Result::kSuccess;
  };
  return staged == nullptr ? EnqueueCapturable(*stream, std::move(copy))
                           : EnqueueOp(*stream, std::move(copy));
}

// To pinned memory the copy is asynchronous; to pageable memory the call
// returns only once the copy has completed, as CUDA documents.
Result MemcpyDtoHAsync(void* dst, DevicePtr src, size_t n,
                       StreamHandle hStream) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(hStream, false, &stream);
      r != Result::kSuccess)
    return r;
  if (n == 0) return Result::kSuccess;
  const auto to = reinterpret_cast<uintptr_t>(dst);
  if (dst == nullptr || !Valid(*stream, src, n)) {
    return Result::kInvalidValue;
  }
  const bool pinned = Pinned(*stream, to, n);
  Op copy = [to, src, n, pinned](Stream& s) -> Result {
    std::shared_ptr<Allocation> to_hold;
    std::shared_ptr<Allocation> from_hold;
    if (Result r = DeviceAccess(s.ctx(), src, n, 1, Access::kAny, &from_hold);
        r != Result::kSuccess) {
      return r;
    }
    if (pinned) {
      if (Result r = DeviceAccess(s.ctx(), to, n, 1, Access::kAny, &to_hold);
          r != Result::kSuccess) {
        return r;
      }
    }
    std::memmove(reinterpret_cast<void*>(to),
                 reinterpret_cast<const void*>(src), n);
    return Result::kSuccess;
  };
  // Captured only into pinned memory: a copy that completes before it
  // returns cannot be recorded.
  if (pinned) return EnqueueCapturable(*stream, std::move(copy));
  uint64_t ticket;
  if (Result r = EnqueueOp(*stream, std::move(copy), &ticket);
      r != Result::kSuccess) {
    return r;
  }
  return WaitForTicket(*stream, ticket);
}

Result MemcpyDtoDAsync(DevicePtr dst, DevicePtr src, size_t n,
                       StreamHandle hStream) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(hStream, false, &stream);
      r != Result::kSuccess)
    return r;
  if (n == 0) return Result::kSuccess;
  if (!Valid(*stream, dst, n) || !Valid(*stream, src, n)) {
    return Result::kInvalidValue;
  }
  return EnqueueCapturable(*stream, [dst, src, n](Stream& s) -> Result {
    std::shared_ptr<Allocation> to_hold;
    std::shared_ptr<Allocation> from_hold;
    if (Result r = DeviceAccess(s.ctx(), dst, n, 1, Access::kAny, &to_hold);
        r != Result::kSuccess) {
      return r;
    }
    if (Result r = DeviceAccess(s.ctx(), src, n, 1, Access::kAny, &from_hold);
        r != Result::kSuccess) {
      return r;
    }
    std::memmove(reinterpret_cast<void*>(dst),
                 reinterpret_cast<const void*>(src), n);
    return Result::kSuccess;
  });
}

// Sets N 32-bit words; dst must be 4-byte aligned.
Result MemsetD32Async(DevicePtr dst, unsigned int ui, size_t N,
                      StreamHandle hStream) {
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(hStream, false, &stream);
      r != Result::kSuccess)
    return r;
  if (dst % 4 != 0 || N > SIZE_MAX / 4) return Result::kInvalidValue;
  if (N == 0) return Result::kSuccess;
  if (!Valid(*stream, dst, 4 * N)) return Result::kInvalidValue;
  return EnqueueCapturable(*stream, [dst, ui, N](Stream& s) -> Result {
    std::shared_ptr<Allocation> hold;
    if (Result r = DeviceAccess(s.ctx(), dst, 4 * N, 4, Access::kAny, &hold);
        r != Result::kSuccess) {
      return r;
    }
    auto* words = reinterpret_cast<uint32_t*>(dst);
    for (size_t i = 0; i < N; ++i) words[i] = ui;
    return Result::kSuccess;
  });
}

}  // namespace fakegpu
