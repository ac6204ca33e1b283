// The `samples` kernel module (see docs/api.md) for the CUDA backend.
//
// Every kernel runs one thread per element along x only: element
// i = blockIdx.x * blockDim.x + threadIdx.x (computed in 64 bits), threads
// with i >= n or a nonzero y/z thread or block index do nothing. Parameter
// order and types are the ABI that samples.manifest.textproto declares;
// change both together.
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
