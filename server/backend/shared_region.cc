// memfd-backed shared host memory.
#include "server/backend/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpustream::backend {
namespace {

// memfd_create's MFD_NOEXEC_SEAL (Linux 6.3), which older headers lack.
#ifdef MFD_NOEXEC_SEAL
constexpr unsigned kNoExecSeal = MFD_NOEXEC_SEAL;
#else
constexpr unsigned kNoExecSeal = 0x0008U;
#endif

}  // namespace

absl::StatusOr<std::shared_ptr<SharedRegion>> SharedRegion::Create(
    uint64_t size) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (size > UINT64_MAX - page) {
    return absl::ResourceExhaustedError(
        absl::StrCat("size_bytes ", size, " cannot be mapped"));
  }
  const uint64_t mapped = size == 0 ? page : (size + page - 1) / page * page;
  int fd = memfd_create("gpustream-shared",
                        MFD_CLOEXEC | MFD_ALLOW_SEALING | kNoExecSeal);
  // Kernels before 6.3 refuse the flag they do not know.
  if (fd < 0 && errno == EINVAL) {
    fd = memfd_create("gpustream-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  }
  if (fd < 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "size_bytes ", size,
        ": host shared memory: memfd_create: ", std::strerror(errno)));
  }
  auto fail = [fd](absl::string_view what) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", std::strerror(err)));
  };
  if (ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    return fail(absl::StrCat("sizing shared memory of ", mapped, " bytes"));
  }
  // Sealed before anyone else can hold the descriptor.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return fail("sealing shared memory");
  }
  void* data = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return fail(absl::StrCat("mapping shared memory of ", mapped, " bytes"));
  }
  return std::shared_ptr<SharedRegion>(
      new SharedRegion(fd, static_cast<std::byte*>(data), size, mapped));
}

SharedRegion::~SharedRegion() {
  munmap(data_, mapped_);
  if (const int fd = TakeFd(); fd >= 0) close(fd);
}

}  // namespace gpustream::backend
