// Fuzz target: the manifest of a CUDA module image
// (modules::ParseModuleManifest) and the check of its kernels against the
// params a binary reports (modules::CheckKernelParams).
//
// Invariants: errors are INVALID_ARGUMENT naming the origin; an accepted
// manifest keeps every promise of module_manifest.h (a name, unique
// non-empty kernel names, defined kinds, BYTES sizes > 0 and others 0); its
// kernels match a binary of their own sizes and not one with a size changed.
#include <google/protobuf/stubs/logging.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/modules/module_manifest.h"

namespace gpustream::fuzz {
namespace {

constexpr char kOrigin[] = "fuzz.manifest.textproto";

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "module_manifest_fuzzer: INVARIANT VIOLATED: %s\n",
               what.c_str());
  std::fflush(stderr);
  std::abort();
}

void CheckRefusal(const absl::Status& status, absl::string_view what) {
  if (status.code() != absl::StatusCode::kInvalidArgument ||
      !absl::StartsWith(status.message(), kOrigin)) {
    Fail(absl::StrCat(what, ": ", status.ToString()));
  }
}

void CheckKernel(const v1::KernelManifest& kernel) {
  std::vector<modules::BinaryParam> binary;
  uint64_t offset = 0;
  for (const v1::ParamManifest& param : kernel.params()) {
    const bool bytes = param.kind() == v1::PARAM_KIND_BYTES;
    if (!v1::ParamKind_IsValid(param.kind()) ||
        param.kind() == v1::PARAM_KIND_UNSPECIFIED ||
        bytes != (param.size_bytes() > 0)) {
      Fail("accepted param: " + param.ShortDebugString());
    }
    const uint32_t size = modules::ParamSize(param);
    if (size == 0) Fail("ParamSize 0 for " + param.ShortDebugString());
    binary.push_back({offset, size});
    offset += size;
  }
  absl::Status same = modules::CheckKernelParams(kernel, binary, kOrigin);
  if (!same.ok()) Fail("its own sizes do not match: " + same.ToString());
  if (!binary.empty()) {
    binary.back().size += 1;
    CheckRefusal(modules::CheckKernelParams(kernel, binary, kOrigin),
                 "a changed size");
    binary.pop_back();
    CheckRefusal(modules::CheckKernelParams(kernel, binary, kOrigin),
                 "a param missing");
  }
}

}  // namespace
}  // namespace gpustream::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpustream;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto manifest =
      modules::ParseModuleManifest(text, fuzz::kOrigin, "default_name");
  if (!manifest.ok()) {
    fuzz::CheckRefusal(manifest.status(), "ParseModuleManifest");
    return 0;
  }
  if (manifest->name().empty()) fuzz::Fail("an accepted manifest has no name");
  std::set<std::string> names;
  for (const v1::KernelManifest& kernel : manifest->kernels()) {
    if (kernel.name().empty() || !names.insert(kernel.name()).second) {
      fuzz::Fail("kernel name empty or repeated: " + kernel.name());
    }
    fuzz::CheckKernel(kernel);
  }
  return 0;
}
