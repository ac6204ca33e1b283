// Fuzz target: AMD code objects as a module file brings them
// (AmdCodeObjectFor: a clang offload bundle or an AMDGPU ELF) and the
// kernel metadata read from them (ReadAmdKernels: ELF sections, notes,
// msgpack), which a HIP module's manifest is checked against.
//
// Invariants: no read outside the input (ASan); errors are INVALID_ARGUMENT
// or, for a bundle without the architecture, NOT_FOUND; an entry found
// lies within the input; every explicit argument read has a value kind and
// is no hidden one.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/backend/hip/hip_code_object.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "amd_code_object_fuzzer: INVARIANT VIOLATED: %s\n",
               what.c_str());
  std::fflush(stderr);
  std::abort();
}

template <typename T>
T Read(absl::string_view data, uint64_t offset) {
  T value{};
  if (offset <= data.size() && data.size() - offset >= sizeof(T)) {
    std::memcpy(&value, data.data() + offset, sizeof(T));
  }
  return value;
}

// How many bytes ROCm's loader takes a code object it is given without a
// size to be (amd::Elf::getElfSize): the end of the section table or of the
// furthest section, stepping 64 bytes a section.
uint64_t RocmSize(absl::string_view elf) {
  const uint64_t table = Read<uint64_t>(elf, 40);
  const uint16_t sections = Read<uint16_t>(elf, 60);
  unsigned __int128 size =
      table + static_cast<unsigned __int128>(sections) * 64;
  uint64_t furthest = 0;
  unsigned __int128 furthest_end = 0;
  for (uint16_t i = 0; i < sections; ++i) {
    const uint64_t entry = table + uint64_t{i} * 64;
    const uint64_t offset = Read<uint64_t>(elf, entry + 24);
    if (offset < furthest) continue;
    furthest = offset;
    furthest_end = offset;
    if (Read<uint32_t>(elf, entry + 4) != 8) {  // Not SHT_NOBITS.
      furthest_end += Read<uint64_t>(elf, entry + 32);
    }
  }
  if (furthest_end > size) size = furthest_end;
  return size > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(size);
}

void CheckKernels(absl::string_view code) {
  auto kernels = gpustream::backend::ReadAmdKernels(code);
  if (!kernels.ok()) {
    if (kernels.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail(kernels.status().ToString());
    }
    return;
  }
  for (const auto& kernel : *kernels) {
    for (const auto& arg : kernel.args) {
      if (arg.value_kind.empty() ||
          absl::StartsWith(arg.value_kind, "hidden_")) {
        Fail(absl::StrCat("kernel ", kernel.name, " kept argument kind '",
                          arg.value_kind, "'"));
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  CheckKernels(input);
  for (const char* arch : {"gfx90a", "gfx1030"}) {
    auto code = gpustream::backend::AmdCodeObjectFor(input, arch);
    if (!code.ok()) {
      const absl::StatusCode c = code.status().code();
      if (c != absl::StatusCode::kInvalidArgument &&
          c != absl::StatusCode::kNotFound) {
        Fail(code.status().ToString());
      }
      continue;
    }
    if (code->data() < input.data() ||
        code->data() + code->size() > input.data() + input.size()) {
      Fail("the entry found lies outside the input");
    }
    if (RocmSize(*code) > code->size()) {
      Fail(absl::StrCat("the runtime would read ", RocmSize(*code),
                        " bytes of a ", code->size(), "-byte code object"));
    }
    CheckKernels(*code);
  }
  return 0;
}
