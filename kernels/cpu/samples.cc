// The `samples` kernel module for the CPU backend.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "kernels/cpu/gpustream_cpu_module.h"

namespace {

// Number of threads in a launch: all of grid times block, saturating at
// 2^64 - 1 (the daemon's limits allow 2^31 * 2^16 * 2^16 * 2^10 = 2^73).
// Only ever compared with element counts, which are far smaller.
uint64_t ThreadCount(const GsLaunch& l) {
  const uint32_t dims[] = {l.grid.x,  l.grid.y,  l.grid.z,
                           l.block.x, l.block.y, l.block.z};
  uint64_t n = 1;
  for (uint32_t d : dims) {
    if (__builtin_mul_overflow(n, uint64_t{d}, &n)) return UINT64_MAX;
  }
  return n;
}

int Fail(const GsLaunch& l, const char* fmt, unsigned long long a,
         unsigned long long b) {
  std::snprintf(l.error, l.error_size, fmt, a, b);
  return 1;
}

// Checks that a buffer argument holds `count` elements of `elem` bytes
// (a division: count * elem could overflow).
bool Holds(const GsSpan& s, uint64_t count, uint64_t elem) {
  return count <= s.size / elem;
}

// How far a buffer argument is from an `elem`-byte boundary (0: aligned).
// A GPU faults on a misaligned access (CUDA_ERROR_MISALIGNED_ADDRESS) and on
// the CPU it is undefined, so a kernel fails instead, naming only the
// remainder (never a host address).
uint64_t Misalignment(const GsSpan& s, uint64_t elem) {
  return reinterpret_cast<uintptr_t>(s.data) % elem;
}

// The elements [begin, end) this call processes, i = block * threads per
// block + thread over its blocks (the whole grid, or one block of a
// cooperative launch); threads past n do nothing, as on a GPU.
struct Range {
  uint64_t begin;
  uint64_t end;
};
Range Active(const GsLaunch& l, uint64_t n) {
  const uint64_t per_block = uint64_t{l.block.x} * l.block.y * l.block.z;
  const uint64_t threads = ThreadCount(l);
  uint64_t begin = 0, end = 0;
  if (__builtin_mul_overflow(l.first_block, per_block, &begin)) begin = threads;
  if (__builtin_mul_overflow(l.first_block + l.block_count, per_block, &end)) {
    end = threads;
  }
  if (end > n) end = n;
  if (begin > end) begin = end;
  return {begin, end};
}

int FillU32(const GsLaunch* l) {
  const GsSpan& out = l->args[0].value.span;
  const uint32_t value = l->args[1].value.u32;
  const Range r = Active(*l, l->args[2].value.u64);
  if (!Holds(out, r.end, 4)) {
    return Fail(*l, "fill_u32: n=%llu elements exceed the buffer's %llu bytes",
                r.end, out.size);
  }
  if (r.end > r.begin && Misalignment(out, 4) != 0) {
    return Fail(*l, "fill_u32: out is not aligned to %llu bytes (off by %llu)",
                4, Misalignment(out, 4));
  }
  auto* p = static_cast<uint32_t*>(out.data);
  for (uint64_t i = r.begin; i < r.end; ++i) p[i] = value;
  return 0;
}

int VectorAddF32(const GsLaunch* l) {
  const GsSpan& a = l->args[0].value.span;
  const GsSpan& b = l->args[1].value.span;
  const GsSpan& c = l->args[2].value.span;
  const Range r = Active(*l, l->args[3].value.u64);
  for (const GsSpan* s : {&a, &b, &c}) {
    if (!Holds(*s, r.end, 4)) {
      return Fail(*l,
                  "vector_add_f32: n=%llu elements exceed a buffer of %llu "
                  "bytes",
                  r.end, s->size);
    }
    if (r.end > r.begin && Misalignment(*s, 4) != 0) {
      return Fail(*l,
                  "vector_add_f32: a buffer is not aligned to %llu bytes (off "
                  "by %llu)",
                  4, Misalignment(*s, 4));
    }
  }
  const auto* pa = static_cast<const float*>(a.data);
  const auto* pb = static_cast<const float*>(b.data);
  auto* pc = static_cast<float*>(c.data);
  for (uint64_t i = r.begin; i < r.end; ++i) pc[i] = pa[i] + pb[i];
  return 0;
}

int SaxpyF32(const GsLaunch* l) {
  const float alpha = l->args[0].value.f32;
  const GsSpan& x = l->args[1].value.span;
  const GsSpan& y = l->args[2].value.span;
  const Range r = Active(*l, l->args[3].value.u64);
  if (!Holds(x, r.end, 4) || !Holds(y, r.end, 4)) {
    return Fail(*l, "saxpy_f32: n=%llu elements exceed a buffer of %llu bytes",
                r.end, x.size < y.size ? x.size : y.size);
  }
  if (r.end > r.begin && (Misalignment(x, 4) != 0 || Misalignment(y, 4) != 0)) {
    return Fail(*l,
                "saxpy_f32: x or y is not aligned to %llu bytes (off by %llu)",
                4, Misalignment(x, 4) | Misalignment(y, 4));
  }
  const auto* px = static_cast<const float*>(x.data);
  auto* py = static_cast<float*>(y.data);
  for (uint64_t i = r.begin; i < r.end; ++i) py[i] = alpha * px[i] + py[i];
  return 0;
}

int AddU64(const GsLaunch* l) {
  const GsSpan& counter = l->args[0].value.span;
  if (!Holds(counter, 1, 8)) {
    return Fail(*l, "add_u64: counter needs %llu bytes, buffer has %llu", 8,
                counter.size);
  }
  // Thread 0 only: the call that runs block 0.
  if (ThreadCount(*l) == 0 || l->first_block != 0) return 0;
  uint64_t v;
  std::memcpy(&v, counter.data, 8);
  v += l->args[1].value.u64;
  std::memcpy(counter.data, &v, 8);
  return 0;
}

// spin_ns(u64 ns): busy for `ns` nanoseconds, or until asked to stop. The
// clock counts signed 64-bit nanoseconds: a duration past what it can
// reach (2^64 - 1: 584 years) saturates to "until stopped" instead of
// wrapping into the past.
int SpinNs(const GsLaunch* l) {
  using Clock = std::chrono::steady_clock;
  static_assert(std::is_same_v<Clock::duration, std::chrono::nanoseconds>);
  const Clock::time_point start = Clock::now();
  const uint64_t ns = l->args[0].value.u64;
  const auto room = (Clock::time_point::max() - start).count();
  const Clock::time_point until =
      room <= 0 || ns >= static_cast<uint64_t>(room)
          ? Clock::time_point::max()
          : start + std::chrono::nanoseconds(static_cast<int64_t>(ns));
  while (Clock::now() < until) {
    if (gs_stop_requested(l)) return 0;  // The daemon fails the launch.
  }
  return 0;
}

int Noop(const GsLaunch*) { return 0; }

// block_rank_u32(out): out[linear block index] = the block's rank in its
// cluster (0 without clusters); clusters are consecutive block indices
// along x, then y, then z.
int BlockRankU32(const GsLaunch* l) {
  const GsSpan& out = l->args[0].value.span;
  const uint64_t end = l->first_block + l->block_count;
  if (!Holds(out, end, 4)) {
    return Fail(*l,
                "block_rank_u32: %llu blocks exceed the buffer's %llu bytes",
                end, out.size);
  }
  if (l->block_count > 0 && Misalignment(out, 4) != 0) {
    return Fail(*l,
                "block_rank_u32: out is not aligned to %llu bytes (off by "
                "%llu)",
                4, Misalignment(out, 4));
  }
  const uint64_t gx = l->grid.x, gxy = gx * l->grid.y;
  const GsDim3 c = l->cluster;
  auto* p = static_cast<uint32_t*>(out.data);
  for (uint64_t b = l->first_block; b < end; ++b) {
    const uint64_t x = b % gx, y = b % gxy / gx, z = b / gxy;
    p[b] = static_cast<uint32_t>(x % c.x + y % c.y * c.x + z % c.z * c.x * c.y);
  }
  return 0;
}

// grid_barrier_u32(out), cooperative launches only: block b stores b + 1
// in out[b], waits for the whole grid (gs_grid_sync), then stores the sum
// of out[0, blocks) in out[blocks + b]. Every such sum is blocks *
// (blocks + 1) / 2 only if the barrier held every block until all had
// stored; outside a cooperative launch the barrier fails, as grid.sync()
// traps on a GPU.
int GridBarrierU32(const GsLaunch* l) {
  const GsSpan& out = l->args[0].value.span;
  const uint64_t blocks = uint64_t{l->grid.x} * l->grid.y * l->grid.z;
  if (!Holds(out, blocks, 8)) {
    return Fail(*l,
                "grid_barrier_u32: %llu blocks need two words each; the "
                "buffer has %llu bytes",
                blocks, out.size);
  }
  if (Misalignment(out, 4) != 0) {
    return Fail(*l,
                "grid_barrier_u32: out is not aligned to %llu bytes (off by "
                "%llu)",
                4, Misalignment(out, 4));
  }
  auto* p = static_cast<uint32_t*>(out.data);
  const uint64_t end = l->first_block + l->block_count;
  for (uint64_t b = l->first_block; b < end; ++b) {
    __atomic_store_n(&p[b], static_cast<uint32_t>(b + 1), __ATOMIC_RELAXED);
  }
  if (gs_grid_sync(l) != 0) {
    std::snprintf(l->error, l->error_size,
                  "grid_barrier_u32: the grid barrier needs a cooperative "
                  "launch (or the launch was stopped)");
    return 1;
  }
  uint32_t sum = 0;
  for (uint64_t b = 0; b < blocks; ++b) {
    sum += __atomic_load_n(&p[b], __ATOMIC_RELAXED);
  }
  for (uint64_t b = l->first_block; b < end; ++b) p[blocks + b] = sum;
  return 0;
}

// trap(): faults on purpose, as the GPU samples' trap does: the kernel
// fails, and with it its queue.
int Trap(const GsLaunch* l) {
  std::snprintf(l->error, l->error_size, "trap: a fault on purpose");
  return 1;
}

constexpr GsParamKind kFillU32[] = {GS_PARAM_BUFFER, GS_PARAM_U32,
                                    GS_PARAM_U64};
constexpr GsParamKind kVectorAddF32[] = {GS_PARAM_BUFFER, GS_PARAM_BUFFER,
                                         GS_PARAM_BUFFER, GS_PARAM_U64};
constexpr GsParamKind kSaxpyF32[] = {GS_PARAM_F32, GS_PARAM_BUFFER,
                                     GS_PARAM_BUFFER, GS_PARAM_U64};
constexpr GsParamKind kAddU64[] = {GS_PARAM_BUFFER, GS_PARAM_U64};
constexpr GsParamKind kSpinNs[] = {GS_PARAM_U64};
constexpr GsParamKind kOneBuffer[] = {GS_PARAM_BUFFER};

// How far each kernel reaches into its buffers (the same as the GPU
// samples' manifest): 4 bytes per element of n, or the 8-byte counter.
constexpr GsExtent kNone = {0, -1, 0, 0, 0};
constexpr GsExtent kWordsOfParam2 = {1, 2, 0, 4, 0};
constexpr GsExtent kWordsOfParam3 = {1, 3, 0, 4, 0};
constexpr GsExtent kOneU64 = {1, -1, 8, 0, 0};
constexpr GsExtent kFillU32Extents[] = {kWordsOfParam2, kNone, kNone};
constexpr GsExtent kVectorAddF32Extents[] = {kWordsOfParam3, kWordsOfParam3,
                                             kWordsOfParam3, kNone};
constexpr GsExtent kSaxpyF32Extents[] = {kNone, kWordsOfParam3, kWordsOfParam3,
                                         kNone};
constexpr GsExtent kAddU64Extents[] = {kOneU64, kNone};
// One word per block (declared per thread: an upper bound), or two.
constexpr GsExtent kBlockRankU32Extents[] = {{1, -1, 0, 0, 4}};
constexpr GsExtent kGridBarrierU32Extents[] = {{1, -1, 0, 0, 8}};

constexpr GsKernelDef kKernels[] = {
    {"fill_u32", kFillU32, 3, FillU32},
    {"vector_add_f32", kVectorAddF32, 4, VectorAddF32},
    {"saxpy_f32", kSaxpyF32, 4, SaxpyF32},
    {"add_u64", kAddU64, 2, AddU64},
    {"spin_ns", kSpinNs, 1, SpinNs},
    {"noop", nullptr, 0, Noop},
    {"trap", nullptr, 0, Trap},
    {"block_rank_u32", kOneBuffer, 1, BlockRankU32},
    {"grid_barrier_u32", kOneBuffer, 1, GridBarrierU32},
};
// One per kernel, in kKernels' order.
constexpr const GsExtent* kExtents[] = {kFillU32Extents,
                                        kVectorAddF32Extents,
                                        kSaxpyF32Extents,
                                        kAddU64Extents,
                                        nullptr,
                                        nullptr,
                                        nullptr,
                                        kBlockRankU32Extents,
                                        kGridBarrierU32Extents};
static_assert(std::size(kExtents) == std::size(kKernels));

constexpr GsModuleDef kModule = {GS_CPU_MODULE_ABI_VERSION, "samples", kKernels,
                                 sizeof(kKernels) / sizeof(kKernels[0]),
                                 kExtents};

}  // namespace

extern "C" __attribute__((visibility("default"))) const GsModuleDef*
gpustream_cpu_module(void) {
  return &kModule;
}
