// Fuzz target: the validation of a CPU module's table
// (backend::CpuModule::Create), the part of loading a --modules .so that
// reads what the module declares. The table is built from the input as a
// module's gpustream_cpu_module() would return it, rather than dlopen-ing
// random bytes (which tests the dynamic loader, not the daemon).
//
// Invariants: a refusal is INVALID_ARGUMENT naming the origin; an accepted
// module has the declared name and every declared kernel, found by name
// with its declared parameter kinds.
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/gpustream_cpu_module.h"
#include "server/backend/cpu/cpu_module.h"
#include "tests/fuzz/fuzz_input.h"

namespace gpustream::fuzz {
namespace {

constexpr char kOrigin[] = "fuzz.so";

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "cpu_module_fuzzer: INVARIANT VIOLATED: %s\n",
               what.c_str());
  std::fflush(stderr);
  std::abort();
}

int Kernel(const GsLaunch*) { return 0; }

// A module table and the storage it points into.
struct Table {
  GsModuleDef def{};
  std::deque<std::string> strings;  // Stable addresses.
  // Kinds as the ints a C module stores: a C++ GsParamKind may not hold a
  // value the enum lacks.
  std::vector<std::vector<int>> params;
  std::vector<std::vector<GsExtent>> extents;
  std::vector<const GsExtent*> extent_table;  // def.extents
  std::vector<GsKernelDef> kernels;
};

// A name: null, empty, one of a few (so that kernels collide), or any bytes
// (C strings: an embedded NUL ends them early).
const char* Name(FuzzInput& in, Table& table) {
  switch (in.Range(0, 7)) {
    case 0:
      return nullptr;
    case 1:
      return "";
    case 2:
      return "fill_u32";
    case 3:
      return "k";
    default:
      return table.strings.emplace_back(in.Bytes(24)).c_str();
  }
}

void Decode(FuzzInput& in, Table& table) {
  switch (in.Range(0, 7)) {
    case 0:
      table.def.abi_version = in.Any<uint32_t>();
      break;
    case 1:
      table.def.abi_version = GS_CPU_MODULE_MIN_ABI_VERSION;
      break;
    default:
      table.def.abi_version = GS_CPU_MODULE_ABI_VERSION;
  }
  table.def.name = in.OneIn(16) ? Name(in, table) : "mod";
  const uint32_t count = in.Range<uint32_t>(0, 8);
  table.params.resize(count);
  for (uint32_t k = 0; k < count; ++k) {
    const uint32_t n = in.Range<uint32_t>(0, 6);
    for (uint32_t p = 0; p < n; ++p) {
      // Mostly defined kinds; a module written in C may declare any int.
      const int kind = in.OneIn(8)
                           ? in.Any<int32_t>()
                           : in.Range<int>(GS_PARAM_BUFFER, GS_PARAM_BYTES);
      table.params[k].push_back(kind);
    }
  }
  table.extents.resize(count);
  for (uint32_t k = 0; k < count; ++k) {
    const int n = static_cast<int>(table.params[k].size());
    // Mostly plausible extents: declared on a BUFFER, counting an integer.
    if (!in.OneIn(4)) {
      for (int p = 0; p < n; ++p) {
        GsExtent e{};
        e.declared = in.OneIn(8) ? in.Any<int32_t>()
                                 : (table.params[k][p] == GS_PARAM_BUFFER);
        e.count_param = in.OneIn(8) ? in.Any<int32_t>() : in.Range(-1, n - 1);
        e.bytes = in.OneIn(4) ? in.Any<uint64_t>() : in.Range<uint64_t>(0, 64);
        e.bytes_per_element =
            e.count_param < 0 && !in.OneIn(8) ? 0 : in.Range<uint64_t>(0, 8);
        e.bytes_per_thread = in.OneIn(4) ? in.Range<uint64_t>(0, 8) : 0;
        table.extents[k].push_back(e);
      }
    }
  }
  for (uint32_t k = 0; k < count; ++k) {
    table.kernels.push_back(
        {Name(in, table),
         reinterpret_cast<const GsParamKind*>(table.params[k].data()),
         static_cast<uint32_t>(table.params[k].size()),
         in.OneIn(16) ? nullptr : &Kernel});
    table.extent_table.push_back(
        table.extents[k].empty() ? nullptr : table.extents[k].data());
  }
  table.def.kernels = table.kernels.data();
  table.def.num_kernels = count;
  table.def.extents = in.OneIn(8) ? nullptr : table.extent_table.data();
}

static_assert(sizeof(GsParamKind) == sizeof(int));

void CheckAccepted(const Table& table, const backend::CpuModule& module) {
  if (module.info().name != table.def.name) Fail("module name changed");
  if (module.info().kernels.size() != table.def.num_kernels) {
    Fail("kernels lost or added");
  }
  for (uint32_t k = 0; k < table.kernels.size(); ++k) {
    const GsKernelDef& kdef = table.kernels[k];
    auto kernel = module.FindKernel(kdef.name);
    if (!kernel.ok()) Fail(absl::StrCat("kernel ", kdef.name, " not found"));
    const backend::KernelSignature& sig = (*kernel)->signature();
    if (sig.params.size() != kdef.num_params) Fail("params lost or added");
    for (uint32_t p = 0; p < kdef.num_params; ++p) {
      if (static_cast<int>(sig.params[p]) != table.params[k][p]) {
        Fail(absl::StrCat("kernel ", kdef.name, " param ", p, " changed kind"));
      }
      // An extent is taken exactly as declared, on a BUFFER, counting an
      // integer param; none before ABI 3.
      const GsExtent* extents =
          table.def.abi_version >= 3 && table.def.extents != nullptr
              ? table.def.extents[k]
              : nullptr;
      const bool declared = extents != nullptr && extents[p].declared != 0;
      const bool has = p < sig.extents.size() && sig.extents[p].has_value();
      if (declared != has) Fail(absl::StrCat("param ", p, " extent lost"));
      if (!has) continue;
      const backend::BufferExtent& e = *sig.extents[p];
      const GsExtent& d = extents[p];
      if (sig.params[p] != backend::ParamKind::kBuffer || e.bytes != d.bytes ||
          e.bytes_per_element != d.bytes_per_element ||
          e.bytes_per_thread != d.bytes_per_thread ||
          e.count_param != d.count_param ||
          (e.count_param >= 0) != (e.bytes_per_element != 0)) {
        Fail(absl::StrCat("param ", p, " extent accepted wrongly"));
      }
      if (e.count_param >= 0) {
        const backend::ParamKind c = sig.params[e.count_param];
        if (c != backend::ParamKind::kI32 && c != backend::ParamKind::kU32 &&
            c != backend::ParamKind::kI64 && c != backend::ParamKind::kU64) {
          Fail(absl::StrCat("param ", p, " counts a non-integer"));
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpustream::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpustream;
  fuzz::FuzzInput in(data, size);
  fuzz::Table table;
  fuzz::Decode(in, table);
  auto module = backend::CpuModule::Create(in.OneIn(64) ? nullptr : &table.def,
                                           fuzz::kOrigin);
  if (!module.ok()) {
    if (module.status().code() != absl::StatusCode::kInvalidArgument ||
        !absl::StartsWith(module.status().message(), fuzz::kOrigin)) {
      fuzz::Fail(
          absl::StrCat("CpuModule::Create: ", module.status().ToString()));
    }
    return 0;
  }
  fuzz::CheckAccepted(table, **module);
  return 0;
}
