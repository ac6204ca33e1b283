// The `samples` kernel module (see docs/api.md) for the CUDA backend.
//
// Every kernel runs one thread per element along x only: element
// i = blockIdx.x * blockDim.x + threadIdx.x (computed in 64 bits), threads
// with i >= n or a nonzero y/z thread or block index do nothing. Parameter
// order and types are the ABI that samples.manifest.textproto declares;
// change both together.
#include <cooperative_groups.h>

#include <cstdint>

namespace {

// Sets `*i` to this thread's element and returns true, or returns false for
// a thread outside the x dimension (nonzero y/z index), which must do
// nothing.
__device__ __forceinline__ bool ElementIndex(uint64_t* i) {
  if ((threadIdx.y | threadIdx.z | blockIdx.y | blockIdx.z) != 0) return false;
  *i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  return true;
}

// Nanoseconds of the GPU's global timer; volatile so each read is a new one.
__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

}  // namespace

// out[i] = value.
extern "C" __global__ void fill_u32(uint32_t* out, uint32_t value, uint64_t n) {
  uint64_t i;
  if (!ElementIndex(&i) || i >= n) return;
  out[i] = value;
}

// c[i] = a[i] + b[i].
extern "C" __global__ void vector_add_f32(const float* a, const float* b,
                                          float* c, uint64_t n) {
  uint64_t i;
  if (!ElementIndex(&i) || i >= n) return;
  c[i] = a[i] + b[i];
}

// y[i] = alpha * x[i] + y[i].
extern "C" __global__ void saxpy_f32(float alpha, const float* x, float* y,
                                     uint64_t n) {
  uint64_t i;
  if (!ElementIndex(&i) || i >= n) return;
  y[i] = alpha * x[i] + y[i];
}

// counter[0] += value, once per launch (by element 0), atomically so that
// launches on concurrent queues all count.
extern "C" __global__ void add_u64(unsigned long long* counter,
                                   uint64_t value) {
  uint64_t i;
  if (!ElementIndex(&i) || i != 0) return;
  atomicAdd(counter, static_cast<unsigned long long>(value));
}

// Element 0 busy-waits `nanoseconds` of %globaltimer (whose resolution is
// device-dependent, up to about a microsecond). At most 64 threads per block:
// the suite relies on this kernel's limit being below the device's.
extern "C" __global__ void __launch_bounds__(64) spin_ns(uint64_t nanoseconds) {
  uint64_t i;
  if (!ElementIndex(&i) || i != 0) return;
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < nanoseconds) {
  }
}

// Does nothing: measures launch overhead.
extern "C" __global__ void noop() {}

// trap(): faults on purpose (a device trap: CUDA_ERROR_LAUNCH_FAILED, which
// loses the context), for fault tests that must fault on a real GPU too,
// where an out-of-bounds write may land silently in the same page.
extern "C" __global__ void trap() { __trap(); }

// The block's linear index x + y * gridDim.x + z * gridDim.x * gridDim.y
// (64 bits).
__device__ __forceinline__ uint64_t LinearBlock() {
  return blockIdx.x + uint64_t{blockIdx.y} * gridDim.x +
         uint64_t{blockIdx.z} * gridDim.x * gridDim.y;
}

__device__ __forceinline__ bool FirstThread() {
  return (threadIdx.x | threadIdx.y | threadIdx.z) == 0;
}

// Thread 0 of each block: out[linear block index] = the block's rank in
// its thread block cluster (0 without clusters, and on devices before
// sm_90, which have none).
extern "C" __global__ void block_rank_u32(uint32_t* out) {
  if (!FirstThread()) return;
  uint32_t rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  rank = cooperative_groups::this_cluster().block_rank();
#endif
  out[LinearBlock()] = rank;
}

// A cooperative launch's grid barrier: thread 0 of block b stores b + 1 in
// out[b]; grid.sync(); then it stores the sum of out[0, blocks) in
// out[blocks + b]. Every sum is blocks * (blocks + 1) / 2 only if all blocks
// were resident at once, which only a cooperative launch guarantees;
// outside one, grid.sync() traps (cooperative_groups aborts: a launch
// failure that loses the context).
extern "C" __global__ void grid_barrier_u32(uint32_t* out) {
  const uint64_t blocks = uint64_t{gridDim.x} * gridDim.y * gridDim.z;
  const uint64_t b = LinearBlock();
  if (FirstThread()) out[b] = static_cast<uint32_t>(b + 1);
  cooperative_groups::this_grid().sync();
  if (!FirstThread()) return;
  uint32_t sum = 0;
  for (uint64_t k = 0; k < blocks; ++k) sum += out[k];
  out[blocks + b] = sum;
}
