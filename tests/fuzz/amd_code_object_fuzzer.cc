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
    CheckKernels(*code);
  }
  return 0;
}
