// cuModuleLoadData's check of an image for the device, as the driver makes
// it before loading anything: its size from a fatbin's or cubin's header,
// and whether it has code (SASS or PTX) that the device's compute
// capability runs. The emulation then loads the kernels the image names.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string_view>

#include "tests/fake_cuda/fake_api.h"
#include "tests/fake_cuda/fake_cuda_skin.h"

namespace fakecuda {
namespace {

template <class T>
T Read(const unsigned char* p, size_t offset) {
  T value;
  std::memcpy(&value, p + offset, sizeof(value));
  return value;
}

// Whether `p` starts with `magic` (nonzero bytes), reading no further than
// the first mismatch.
bool StartsWith(const unsigned char* p, std::initializer_list<int> magic) {
  for (int byte : magic) {
    if (*p++ != byte) return false;
  }
  return true;
}

constexpr uint64_t kMaxImageSize = uint64_t{1} << 30;

// The size of the image at `p`, which cuModuleLoadData gets without one:
// from the header of a fatbin (nvcc -fatbin) or a 64-bit ELF cubin;
// anything else is text (PTX, or a test's list of names) up to its NUL.
// 0 for an empty or implausible image. The magic numbers are compared a
// byte at a time, so a short text image is never read past its NUL.
uint64_t ImageSize(const unsigned char* p) {
  if (StartsWith(p, {0x50, 0xED, 0x55, 0xBA})) {  // fatbin: magic, version,
    const uint64_t size = uint64_t{Read<uint16_t>(p, 6)} +  // header size,
                          Read<uint64_t>(p, 8);             // payload size
    return size <= kMaxImageSize ? size : 0;
  }
  if (StartsWith(p, {0x7F, 'E', 'L', 'F', 2})) {  // 64-bit ELF
    const uint64_t phoff = Read<uint64_t>(p, 0x20);
    const uint64_t shoff = Read<uint64_t>(p, 0x28);
    const uint64_t phsize =
        uint64_t{Read<uint16_t>(p, 0x36)} * Read<uint16_t>(p, 0x38);
    const uint64_t shentsize = Read<uint16_t>(p, 0x3A);
    const uint64_t shnum = Read<uint16_t>(p, 0x3C);
    if (phoff > kMaxImageSize || shoff > kMaxImageSize) return 0;
    uint64_t size =
        std::max<uint64_t>({64, phoff + phsize, shoff + shentsize * shnum});
    for (uint64_t i = 0; i < shnum && shentsize >= 0x28; ++i) {
      const unsigned char* sh = p + shoff + i * shentsize;
      if (Read<uint32_t>(sh, 4) == 8) continue;  // SHT_NOBITS: no bytes
      const uint64_t offset = Read<uint64_t>(sh, 0x18);
      const uint64_t bytes = Read<uint64_t>(sh, 0x20);
      if (offset > kMaxImageSize || bytes > kMaxImageSize) return 0;
      size = std::max(size, offset + bytes);
    }
    return size <= kMaxImageSize ? size : 0;
  }
  return std::strlen(reinterpret_cast<const char*>(p));
}

// Whether SASS built for `arch` runs on a device of compute capability
// `cc` (both major * 10 + minor): same major, minor at most the device's
// (sm_80 code runs on 8.6, not on 9.0). PTX for `arch` runs wherever
// arch <= cc: the driver compiles it.
bool SassRuns(uint32_t arch, int cc) {
  return static_cast<int>(arch) / 10 == cc / 10 &&
         static_cast<int>(arch) % 10 <= cc % 10;
}

// Whether the image of `size` bytes at `p` has code for a device of compute
// capability `cc`, as the driver decides before it loads anything:
// CUDA_ERROR_NO_BINARY_FOR_GPU for a fatbin none of whose entries runs
// there or a cubin built for another architecture, CUDA_ERROR_INVALID_PTX
// for PTX whose `.target` is newer than the device. Other text (a test's
// list of kernel names) runs anywhere.
CUresult CodeFor(const unsigned char* p, uint64_t size, int cc) {
  if (size >= 16 && StartsWith(p, {0x50, 0xED, 0x55, 0xBA})) {
    // Entries follow the header: kind (1 PTX, 2 ELF) at 0, the entry's
    // header size at 4, its payload size at 8, the architecture at 28.
    const uint64_t end = std::min<uint64_t>(
        size, uint64_t{Read<uint16_t>(p, 6)} + Read<uint64_t>(p, 8));
    for (uint64_t at = Read<uint16_t>(p, 6); at + 32 <= end;) {
      const uint16_t kind = Read<uint16_t>(p, at);
      const uint64_t header = Read<uint32_t>(p, at + 4);
      const uint64_t payload = Read<uint64_t>(p, at + 8);
      const uint32_t arch = Read<uint32_t>(p, at + 28);
      if ((kind == 1 && static_cast<int>(arch) <= cc) ||
          (kind == 2 && SassRuns(arch, cc))) {
        return CUDA_SUCCESS;
      }
      if (header < 32 || header > kMaxImageSize || payload > kMaxImageSize) {
        break;
      }
      at += header + payload;
    }
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  if (size >= 64 && StartsWith(p, {0x7F, 'E', 'L', 'F', 2})) {
    // e_flags: the SM in bits 8..15 from ELF ABI version 8 (CUDA 12.x and
    // later), in bits 0..7 before.
    const uint32_t flags = Read<uint32_t>(p, 0x30);
    const uint32_t arch = p[8] >= 8 ? (flags >> 8) & 0xFF : flags & 0xFF;
    return SassRuns(arch, cc) ? CUDA_SUCCESS : CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  const std::string_view text(reinterpret_cast<const char*>(p), size);
  if (const size_t at = text.find(".target sm_");
      at != std::string_view::npos) {
    int arch = 0;
    for (size_t i = at + 11;
         i < text.size() && text[i] >= '0' && text[i] <= '9' && arch < 1000;
         ++i) {
      arch = arch * 10 + (text[i] - '0');
    }
    return arch <= cc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_PTX;
  }
  return CUDA_SUCCESS;
}

}  // namespace

uint64_t CheckImage(const void* image, CUresult* error) {
  const auto* bytes = static_cast<const unsigned char*>(image);
  const uint64_t size = bytes[0] == 0 ? 0 : ImageSize(bytes);
  if (size == 0) {
    *error = CUDA_ERROR_INVALID_IMAGE;
    return 0;
  }
  *error = CodeFor(bytes, size, ComputeCapability());
  return *error == CUDA_SUCCESS ? size : 0;
}

// CUDA_ERROR_INVALID_IMAGE for an empty image or one that names no kernel
// with a CPU twin.
CUresult Fake_cuModuleLoadData(CUmodule* module, const void* image) {
  // The context comes first, as in the driver.
  if (CUresult r = ToCu(fakegpu::CtxCheckCurrent()); r != CUDA_SUCCESS) {
    return r;
  }
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult error = CUDA_SUCCESS;
  const uint64_t size = CheckImage(image, &error);
  if (size == 0) return error;
  return ToCu(
      fakegpu::ModuleLoadTwins(static_cast<const char*>(image), size,
                               HandleCast<fakegpu::ModuleHandle*>(module)));
}

}  // namespace fakecuda
