// Vendor-neutral value types shared by every backend interface.
#ifndef GPUSTREAM_SERVER_BACKEND_TYPES_H_
#define GPUSTREAM_SERVER_BACKEND_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpustream::backend {

// kHostShared: host memory the daemon and a client both map (a memfd, see
// SharedRegion); the device reaches it as it does kHostPinned memory.
enum class MemoryKind { kDevice, kHostPinned, kHostShared };

enum class WaitCondition { kEqual, kGreaterEqual };

// Kernel parameter kinds; numbered as gpustream.v1.ParamKind.
enum class ParamKind : int {
  kBuffer = 1,
  kI32 = 2,
  kU32 = 3,
  kI64 = 4,
  kU64 = 5,
  kF32 = 6,
  kF64 = 7,
  kBytes = 8,
};

// Upper-case name as in the proto's ParamKind ("BUFFER", "U32", ...).
const char* ParamKindName(ParamKind kind);

// Whether a flag holding `value` satisfies a wait for `target`. GREATER_EQUAL
// is CUDA's stream-memory comparison, (int64_t)(value - target) >= 0, so a
// counter that wraps around keeps working: the same on every backend.
inline bool Satisfies(uint64_t value, uint64_t target, WaitCondition c) {
  if (c == WaitCondition::kEqual) return value == target;
  return static_cast<int64_t>(value - target) >= 0;
}

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t Volume() const { return uint64_t{x} * y * z; }
};

// How one launch runs: validated against the device's and the kernel's
// limits before a backend sees it.
struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  uint32_t shared_memory_bytes = 0;
  // Thread block clusters (a cluster is consecutive block indices along x,
  // then y, then z); validation made every grid dimension a multiple of
  // the cluster's and the volume at most DeviceInfo::max_cluster_size.
  bool clustered = false;
  Dim3 cluster;
  // Every block co-resident (grid-wide synchronization allowed). The
  // backend's Launch refuses a grid it cannot hold resident with
  // OUT_OF_RANGE naming the limit, before anything is enqueued.
  bool cooperative = false;
};

// Where one parameter lives in the kernel's argument block.
struct ParamLayout {
  uint32_t size = 0;    // Bytes; 0 for a CPU BYTES param (any size).
  uint32_t offset = 0;  // From the block's start; 0 where unknown (CPU).
};

// What one kernel accepts, checked per launch before the device sees it.
struct KernelLimits {
  uint32_t max_threads_per_block = 0;
  uint32_t static_shared_memory_bytes = 0;
  // The most dynamic shared memory a launch may ask for.
  uint32_t max_dynamic_shared_memory_bytes = 0;
};

// The bytes a kernel may touch through one BUFFER argument, from the
// argument's offset: bytes + bytes_per_element * (args[count_param]'s value)
// + bytes_per_thread * (grid volume * block volume). Declared by the module
// (a manifest's `extent`, a CPU module's GsExtent).
struct BufferExtent {
  uint64_t bytes = 0;
  uint64_t bytes_per_element = 0;
  int count_param = -1;  // An integer scalar param's index; -1: none.
  uint64_t bytes_per_thread = 0;
};

struct KernelSignature {
  std::string name;
  std::vector<ParamKind> params;
  std::vector<ParamLayout> layout;  // One per param.
  KernelLimits limits;
  // One per param, or empty: a BUFFER param's declared extent, if any.
  std::vector<std::optional<BufferExtent>> extents;
  // One per param where the module names them (manifests), or empty.
  std::vector<std::string> param_names;

  // Whether every BUFFER param declares its extent (Kernel.checked).
  bool checked() const {
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i] == ParamKind::kBuffer &&
          (i >= extents.size() || !extents[i].has_value())) {
        return false;
      }
    }
    return true;
  }
};

// The natural size of a parameter kind in an argument block (a BUFFER is a
// device pointer); 0 for BYTES, whose size the module declares.
uint32_t ParamKindSize(ParamKind kind);

struct ModuleInfo {
  std::string name;
  std::vector<KernelSignature> kernels;
};

// Static facts about a device, reported by ListDevices.
struct DeviceInfo {
  std::string backend;  // "cpu", "cuda" or "hip".
  std::string name;
  std::string arch;
  uint32_t multiprocessor_count = 0;
  int32_t priority_least = 0;
  int32_t priority_greatest = 0;
  // Native device-side flag waits (CUDA: 64-bit stream memory operations).
  // Without them a backend holds a queue's later work in the daemon until
  // the flag satisfies the wait: correct, with a host round trip of latency.
  bool supports_wait_value = false;
  // Whether queues' flag waits run on the device ("native") rather than
  // held in the daemon: false where the device's waits are unsafe to park
  // on (HIP 5.x: each one a spinning kernel on a shared hardware queue).
  bool native_wait_value = true;
  bool supports_host_func = false;
  bool supports_timing = false;
  // False where a kernel fault takes the whole process down (ROCm 5.x
  // aborts): the daemon exits and its supervisor restarts it.
  bool faults_recoverable = true;
  Dim3 max_grid;
  Dim3 max_block;
  uint32_t max_threads_per_block = 0;
  uint32_t max_shared_memory_bytes = 0;  // Per block.
  // Blocks per cluster a launch may ask for; 0: no clusters.
  uint32_t max_cluster_size = 0;
  bool supports_cooperative_launch = false;
  // Captured graphs (Queue::LaunchGraph): every backend replays them.
  bool supports_graphs = true;
};

struct MemoryInfo {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  // The step in which free_bytes moves: an allocation may take up to this
  // much more than asked (a GPU maps device memory in 2 MiB pages), so
  // figures compare within it.
  uint64_t granularity_bytes = 1;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_TYPES_H_
