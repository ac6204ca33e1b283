// Vendor-neutral value types shared by every backend interface.
#ifndef GPUSTREAM_SERVER_BACKEND_TYPES_H_
#define GPUSTREAM_SERVER_BACKEND_TYPES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace gpustream::backend {

enum class MemoryKind { kDevice, kHostPinned };

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

// Upper-case name as in API.md ("BUFFER", "U32", ...).
const char* ParamKindName(ParamKind kind);

inline bool Satisfies(uint64_t value, uint64_t target, WaitCondition c) {
  return c == WaitCondition::kEqual ? value == target : value >= target;
}

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t Volume() const { return uint64_t{x} * y * z; }
};

struct KernelSignature {
  std::string name;
  std::vector<ParamKind> params;
};

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
  bool supports_wait_value = false;
  bool supports_host_func = false;
  bool supports_timing = false;
  Dim3 max_grid;
  Dim3 max_block;
  uint32_t max_threads_per_block = 0;
  uint32_t max_shared_memory_bytes = 0;  // Per block.
};

struct MemoryInfo {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_TYPES_H_
