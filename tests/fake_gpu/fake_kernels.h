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

struct Twin {
  const char* name;  // the extern "C" kernel name
  int param_count;
  KernelParam params[4];
  int max_threads_per_block;  // 1024, or the kernel's __launch_bounds__
  // Runs one launch on `stream`'s worker: `args` holds the parameters at
  // their offsets (ArgsSize bytes), `threads` is grid.x * block.x (the
  // kernels use the x dimension only), `blocks` the grid's volume. Returns
  // Result::kSuccess or the fault (Result::kIllegalAddress,
  // Result::kMisalignedAddress); a fault happens before any element is
  // written.
  Result (*run)(Stream& stream, const unsigned char* args, uint64_t threads,
                uint64_t blocks);
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
