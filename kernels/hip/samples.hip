// The `samples` kernel module (see docs/api.md) for the HIP backend: the
// same kernels, names and parameters as kernels/cuda/samples.cu, declared by
// the one manifest both GPU backends share
// (kernels/cuda/samples.manifest.textproto).
//
// Built without ROCm: clang's amdgcn builtins stand in for hip_runtime.h
// (-nogpulib -nogpuinc), so the build needs only clang (kernels/hip/BUILD).
//
// Every kernel runs one thread per element along x only: element
// i = blockIdx.x * blockDim.x + threadIdx.x (computed in 64 bits), threads
// with i >= n or a nonzero y/z thread or block index do nothing.
#include <stdint.h>

#define GLOBAL extern "C" __attribute__((global))
#define DEVICE static __attribute__((device)) __attribute__((always_inline))

namespace {

// The dispatch packet's workgroup size along x (hsa_kernel_dispatch_packet_t
// keeps it as a 16-bit field at byte 4).
DEVICE uint32_t BlockDimX() {
  const uint16_t* packet =
      reinterpret_cast<const uint16_t*>(__builtin_amdgcn_dispatch_ptr());
  return packet[2];
}

// Sets `*i` to this thread's element and returns true, or returns false for
// a thread outside the x dimension (nonzero y/z index), which must do
// nothing.
DEVICE bool ElementIndex(uint64_t* i) {
  if ((__builtin_amdgcn_workitem_id_y() | __builtin_amdgcn_workitem_id_z() |
       __builtin_amdgcn_workgroup_id_y() | __builtin_amdgcn_workgroup_id_z()) !=
      0) {
    return false;
  }
  *i = uint64_t{__builtin_amdgcn_workgroup_id_x()} * BlockDimX() +
       __builtin_amdgcn_workitem_id_x();
  return true;
}

// Nanoseconds of the device's constant 100 MHz real-time counter
// (s_memrealtime on gfx90a; hipDeviceAttributeWallClockRate reports it).
DEVICE uint64_t RealTimeNs() { return __builtin_amdgcn_s_memrealtime() * 10; }

}  // namespace

// out[i] = value.
GLOBAL void fill_u32(uint32_t* out, uint32_t value, uint64_t n) {
  uint64_t i;
  if (!ElementIndex(&i) || i >= n) return;
  out[i] = value;
}

// c[i] = a[i] + b[i].
GLOBAL void vector_add_f32(const float* a, const float* b, float* c,
                           uint64_t n) {
  uint64_t i;
  if (!ElementIndex(&i) || i >= n) return;
  c[i] = a[i] + b[i];
}

// y[i] = alpha * x[i] + y[i].
GLOBAL void saxpy_f32(float alpha, const float* x, float* y, uint64_t n) {
  uint64_t i;
  if (!ElementIndex(&i) || i >= n) return;
  y[i] = alpha * x[i] + y[i];
}

// counter[0] += value, once per launch (by element 0), atomically so that
// launches on concurrent queues all count.
GLOBAL void add_u64(unsigned long long* counter, uint64_t value) {
  uint64_t i;
  if (!ElementIndex(&i) || i != 0) return;
  __atomic_fetch_add(counter, value, __ATOMIC_RELAXED);
}

// Element 0 busy-waits `nanoseconds` of the real-time counter. At most 64
// threads per block, as on CUDA: the suite relies on this kernel's limit
// being below the device's.
GLOBAL __attribute__((amdgpu_flat_work_group_size(1, 64))) void spin_ns(
    uint64_t nanoseconds) {
  uint64_t i;
  if (!ElementIndex(&i) || i != 0) return;
  const uint64_t start = RealTimeNs();
  while (RealTimeNs() - start < nanoseconds) {
  }
}

// Does nothing: measures launch overhead.
GLOBAL void noop() {}

// trap(): faults on purpose (s_trap: the queue errors, which ROCm 5.2 turns
// into an abort of the process), for fault tests that must fault on a real
// GPU too.
GLOBAL void trap() { __builtin_trap(); }

// Thread 0 of each block: out[linear block index] = the block's rank in its
// cluster, always 0: AMD GPUs under ROCm 5.2 have no thread block clusters
// (the device reports max_cluster_size 0, so no launch asks for one).
GLOBAL void block_rank_u32(uint32_t* out) {
  if ((__builtin_amdgcn_workitem_id_x() | __builtin_amdgcn_workitem_id_y() |
       __builtin_amdgcn_workitem_id_z()) != 0) {
    return;
  }
  const uint64_t gx = __builtin_amdgcn_grid_size_x() / BlockDimX();
  const uint16_t* packet =
      reinterpret_cast<const uint16_t*>(__builtin_amdgcn_dispatch_ptr());
  const uint64_t gy = __builtin_amdgcn_grid_size_y() / packet[3];
  const uint64_t b = __builtin_amdgcn_workgroup_id_x() +
                     __builtin_amdgcn_workgroup_id_y() * gx +
                     __builtin_amdgcn_workgroup_id_z() * gx * gy;
  out[b] = 0;
}

// grid_barrier_u32(out): ROCm 5.2 launches no module kernel cooperatively
// (the device reports supports_cooperative_launch false), so a grid
// barrier cannot hold here. It returns without writing rather than trap:
// a trap aborts the whole daemon under ROCm 5.x, for every tenant.
GLOBAL void grid_barrier_u32(uint32_t*) {}
