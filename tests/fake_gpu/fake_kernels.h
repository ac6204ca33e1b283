// CPU twins of the `samples` kernels (kernels/cuda/samples.cu,
// kernels/hip/samples.hip): what the fake driver runs for a launch of a kernel
// it knows, with the same parameter layout and effects, and every memory access
// bounds-checked.
#ifndef TESTS_FAKE_GPU_FAKE_KERNELS_H_
#define TESTS_FAKE_GPU_FAKE_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "tests/fake_gpu/fake_gpu.h"

namespace fakegpu {

class Stream;

struct KernelParam {
  size_t offset;
  size_t size;
};

// The shape of one launch, as a twin sees it.
struct TwinLaunch {
  uint64_t threads = 0;  // grid.x * block.x (the kernels index along x)
  uint64_t blocks = 0;   // the grid's volume
  unsigned grid[3] = {1, 1, 1};
  unsigned cluster[3] = {1, 1, 1};  // {1, 1, 1} without clusters
  // Every block resident at once (the driver checked the grid fits).
  bool cooperative = false;
};

struct Twin {
  const char* name;  // the extern "C" kernel name
  int param_count;
  KernelParam params[4];
  int max_threads_per_block;  // 1024, or the kernel's __launch_bounds__
  // Runs one launch on `stream`'s worker: `args` holds the parameters at
  // their offsets (ArgsSize bytes). Returns Result::kSuccess or the fault
  // (Result::kIllegalAddress, Result::kMisalignedAddress,
  // Result::kLaunchFailed for a trap); a fault happens before any element
  // is written.
  Result (*run)(Stream& stream, const unsigned char* args,
                const TwinLaunch& launch);
};

// All twins.
std::span<const Twin> Twins();

// The twin named `name`, or nullptr.
const Twin* FindTwin(std::string_view name);

// Bytes of the parameter buffer: the end of the last parameter.
size_t ArgsSize(const Twin& twin);

// The most parameter bytes of any twin.
inline constexpr size_t kMaxArgsSize = 32;

}  // namespace fakegpu

#endif  // TESTS_FAKE_GPU_FAKE_KERNELS_H_
