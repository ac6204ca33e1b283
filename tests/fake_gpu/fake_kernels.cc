// The CPU twins of the `samples` kernels. As in samples.cu, element
// i = blockIdx.x * blockDim.x + threadIdx.x, threads with i >= n do
// nothing, so a launch touches min(n, grid.x * block.x) elements. Every
// range is checked against the context's live allocations (its device
// memory and pinned memory) before it is touched.
#include "tests/fake_gpu/fake_kernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>

#include "tests/fake_gpu/fake_memory.h"
#include "tests/fake_gpu/fake_progress.h"
#include "tests/fake_gpu/fake_stream.h"

namespace fakegpu {
namespace {

template <class T>
T Arg(const unsigned char* args, size_t offset) {
  T value;
  std::memcpy(&value, args + offset, sizeof(value));
  return value;
}

// An access to `count` elements of T at `addr`, checked as a GPU checks it
// (KernelAccess: page-granular): Result::kSuccess, holding the allocation in
// *hold where the access lies in one, or the fault.
template <class T>
Result Elements(Stream& stream, uint64_t addr, uint64_t count,
                std::shared_ptr<Allocation>* hold) {
  if (count > SIZE_MAX / sizeof(T)) return Result::kIllegalAddress;
  return KernelAccess(stream.ctx(), addr, count * sizeof(T), alignof(T), hold);
}

// fill_u32(uint32_t* out, uint32_t value, uint64_t n): out[i] = value.
Result FillU32(Stream& stream, const unsigned char* args,
               const TwinLaunch& launch) {
  const uint64_t threads = launch.threads;
  const auto out = Arg<uint64_t>(args, 0);
  const auto value = Arg<uint32_t>(args, 8);
  const uint64_t n = std::min(Arg<uint64_t>(args, 16), threads);
  std::shared_ptr<Allocation> hold;
  if (Result r = Elements<uint32_t>(stream, out, n, &hold);
      r != Result::kSuccess) {
    return r;
  }
  auto* p = reinterpret_cast<uint32_t*>(out);
  std::fill(p, p + n, value);
  return Result::kSuccess;
}

// vector_add_f32(const float* a, const float* b, float* c, uint64_t n):
// c[i] = a[i] + b[i].
Result VectorAddF32(Stream& stream, const unsigned char* args,
                    const TwinLaunch& launch) {
  const uint64_t threads = launch.threads;
  const auto a = Arg<uint64_t>(args, 0);
  const auto b = Arg<uint64_t>(args, 8);
  const auto c = Arg<uint64_t>(args, 16);
  const uint64_t n = std::min(Arg<uint64_t>(args, 24), threads);
  std::shared_ptr<Allocation> holds[3];
  const uint64_t ptrs[3] = {a, b, c};
  for (int k = 0; k < 3; ++k) {
    if (Result r = Elements<float>(stream, ptrs[k], n, &holds[k]);
        r != Result::kSuccess) {
      return r;
    }
  }
  const auto* pa = reinterpret_cast<const float*>(a);
  const auto* pb = reinterpret_cast<const float*>(b);
  auto* pc = reinterpret_cast<float*>(c);
  for (uint64_t i = 0; i < n; ++i) pc[i] = pa[i] + pb[i];
  return Result::kSuccess;
}

// saxpy_f32(float alpha, const float* x, float* y, uint64_t n):
// y[i] = alpha * x[i] + y[i].
Result SaxpyF32(Stream& stream, const unsigned char* args,
                const TwinLaunch& launch) {
  const uint64_t threads = launch.threads;
  const auto alpha = Arg<float>(args, 0);
  const auto x = Arg<uint64_t>(args, 8);
  const auto y = Arg<uint64_t>(args, 16);
  const uint64_t n = std::min(Arg<uint64_t>(args, 24), threads);
  std::shared_ptr<Allocation> x_hold;
  std::shared_ptr<Allocation> y_hold;
  if (Result r = Elements<float>(stream, x, n, &x_hold);
      r != Result::kSuccess) {
    return r;
  }
  if (Result r = Elements<float>(stream, y, n, &y_hold);
      r != Result::kSuccess) {
    return r;
  }
  const auto* px = reinterpret_cast<const float*>(x);
  auto* py = reinterpret_cast<float*>(y);
  for (uint64_t i = 0; i < n; ++i) py[i] = alpha * px[i] + py[i];
  return Result::kSuccess;
}

// add_u64(unsigned long long* counter, uint64_t value): element 0 adds
// value to counter[0], atomically (launches on other streams may race).
Result AddU64(Stream& stream, const unsigned char* args,
              const TwinLaunch& launch) {
  const uint64_t threads = launch.threads;
  const auto counter = Arg<uint64_t>(args, 0);
  const auto value = Arg<uint64_t>(args, 8);
  if (threads == 0) return Result::kSuccess;
  std::shared_ptr<Allocation> hold;
  if (Result r = Elements<uint64_t>(stream, counter, 1, &hold);
      r != Result::kSuccess) {
    return r;
  }
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(counter))
      .fetch_add(value, std::memory_order_acq_rel);
  return Result::kSuccess;
}

// spin_ns(uint64_t nanoseconds): each block runs that long, so the launch
// takes that long per wave of blocks on the stream's SMs (one block per SM
// at a time: SM-bound work, which a green context's partition slows in
// proportion). The twin sleeps (waking early if the stream is stopped or
// the context faults) instead of burning a core.
Result SpinNs(Stream& stream, const unsigned char* args,
              const TwinLaunch& launch) {
  const uint64_t blocks = launch.blocks;
  const uint64_t waves = (blocks + stream.sms() - 1) / stream.sms();
  const uint64_t ns =
      std::min(Arg<uint64_t>(args, 0), uint64_t{1} << 62 >> 20) *
      std::min<uint64_t>(waves, uint64_t{1} << 20);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::nanoseconds(static_cast<int64_t>(ns));
  Progress::WaitUntil([&] { return stream.Interrupted(); }, deadline);
  return Result::kSuccess;
}

// noop(): nothing.
Result Noop(Stream&, const unsigned char*, const TwinLaunch&) {
  return Result::kSuccess;
}

// trap(): a device trap, which the driver reports as a launch failure that
// poisons the context.
Result Trap(Stream&, const unsigned char*, const TwinLaunch&) {
  return Result::kLaunchFailed;
}

// block_rank_u32(uint32_t* out): out[linear block index] = the block's
// rank in its cluster (%cluster_ctarank; 0 without clusters).
Result BlockRankU32(Stream& stream, const unsigned char* args,
                    const TwinLaunch& launch) {
  const auto out = Arg<uint64_t>(args, 0);
  std::shared_ptr<Allocation> hold;
  if (Result r = Elements<uint32_t>(stream, out, launch.blocks, &hold);
      r != Result::kSuccess) {
    return r;
  }
  auto* p = reinterpret_cast<uint32_t*>(out);
  const uint64_t gx = launch.grid[0], gxy = gx * launch.grid[1];
  const unsigned* c = launch.cluster;
  for (uint64_t b = 0; b < launch.blocks; ++b) {
    const uint64_t x = b % gx, y = b % gxy / gx, z = b / gxy;
    p[b] = static_cast<uint32_t>(x % c[0] + y % c[1] * c[0] +
                                 z % c[2] * c[0] * c[1]);
  }
  return Result::kSuccess;
}

// grid_barrier_u32(uint32_t* out): block b stores b + 1 in out[b], then
// grid.sync(), then stores the sum of out[0, blocks) in out[blocks + b].
// cooperative_groups' grid.sync() traps outside a cooperative launch (its
// grid workspace exists only there): a launch failure, as on the device.
// A cooperative launch has every block resident, so the barrier holds.
Result GridBarrierU32(Stream& stream, const unsigned char* args,
                      const TwinLaunch& launch) {
  if (!launch.cooperative) return Result::kLaunchFailed;
  const auto out = Arg<uint64_t>(args, 0);
  std::shared_ptr<Allocation> hold;
  if (launch.blocks > UINT64_MAX / 2) return Result::kIllegalAddress;
  if (Result r = Elements<uint32_t>(stream, out, 2 * launch.blocks, &hold);
      r != Result::kSuccess) {
    return r;
  }
  auto* p = reinterpret_cast<uint32_t*>(out);
  uint32_t sum = 0;
  for (uint64_t b = 0; b < launch.blocks; ++b) {
    p[b] = static_cast<uint32_t>(b + 1);
    sum += p[b];
  }
  for (uint64_t b = 0; b < launch.blocks; ++b) p[launch.blocks + b] = sum;
  return Result::kSuccess;
}

constexpr Twin kTwins[] = {
    {"fill_u32", 3, {{0, 8}, {8, 4}, {16, 8}}, 1024, &FillU32},
    {"vector_add_f32",
     4,
     {{0, 8}, {8, 8}, {16, 8}, {24, 8}},
     1024,
     &VectorAddF32},
    {"saxpy_f32", 4, {{0, 4}, {8, 8}, {16, 8}, {24, 8}}, 1024, &SaxpyF32},
    {"add_u64", 2, {{0, 8}, {8, 8}}, 1024, &AddU64},
    {"spin_ns", 1, {{0, 8}}, 64, &SpinNs},  // __launch_bounds__(64)
    {"noop", 0, {}, 1024, &Noop},
    {"trap", 0, {}, 1024, &Trap},
    {"block_rank_u32", 1, {{0, 8}}, 1024, &BlockRankU32},
    {"grid_barrier_u32", 1, {{0, 8}}, 1024, &GridBarrierU32},
};

}  // namespace

std::span<const Twin> Twins() { return kTwins; }

const Twin* FindTwin(std::string_view name) {
  for (const Twin& twin : kTwins) {
    if (name == twin.name) return &twin;
  }
  return nullptr;
}

size_t ArgsSize(const Twin& twin) {
  if (twin.param_count == 0) return 0;
  const KernelParam& last = twin.params[twin.param_count - 1];
  return last.offset + last.size;
}

}  // namespace fakegpu
