// CPU twins of the `samples` CUDA kernels (kernels/cuda/samples.cu): what
// the fake driver runs for a launch of a kernel it knows, with the same
// parameter layout and effects, and every memory access bounds-checked.
#ifndef TESTS_FAKE_CUDA_FAKE_KERNELS_H_
#define TESTS_FAKE_CUDA_FAKE_KERNELS_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace fakecuda {

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
  // kernels use the x dimension only). Returns CUDA_SUCCESS or the fault
  // (CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_MISALIGNED_ADDRESS); a fault
  // happens before any element is written.
  CUresult (*run)(Stream& stream, const unsigned char* args, uint64_t threads);
};

// All twins.
std::span<const Twin> Twins();

// The twin named `name`, or nullptr.
const Twin* FindTwin(std::string_view name);

// Bytes of the parameter buffer: the end of the last parameter.
size_t ArgsSize(const Twin& twin);

// The most parameter bytes of any twin.
inline constexpr size_t kMaxArgsSize = 32;

}  // namespace fakecuda

#endif  // TESTS_FAKE_CUDA_FAKE_KERNELS_H_
