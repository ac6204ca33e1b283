// The entry of libfakecuda.so: cuGetProcAddress_v2, through which a client
// resolves every other entry point by name, as it would with libcuda.so.1.
// The library exports only cuGetProcAddress_v2, cuInit and
// cuDriverGetVersion (everything else is built with -fvisibility=hidden).
#include <cstring>

#include "tests/fake_cuda/fake_api.h"
#include "tests/fake_cuda/fake_cuda_skin.h"

namespace fakecuda {
namespace {

#define FAKECUDA_STRINGIFY(x) #x
#define FAKECUDA_EXPANDED_NAME(x) FAKECUDA_STRINGIFY(x)

struct ProcEntry {
  const char* name;       // base name, e.g. "cuMemAlloc"
  const char* versioned;  // cuda.h's symbol, e.g. "cuMemAlloc_v2"
  int since;              // lowest cudaVersion served
  void* fn;
};

// static_cast checks that Fake_<name> has the type cuda.h gives `name`.
#define FAKECUDA_PROC_ENTRY(name, since)          \
  ProcEntry{                                      \
      #name, FAKECUDA_EXPANDED_NAME(name), since, \
      reinterpret_cast<void*>(static_cast<decltype(&name)>(&Fake_##name))},

const ProcEntry kProcs[] = {FAKECUDA_ENTRY_POINTS(FAKECUDA_PROC_ENTRY)};

#undef FAKECUDA_PROC_ENTRY

// Base names whose newest ABI is not the one cuda.h declares under the
// name: from cudaVersion `since` on, cuGetProcAddress gives `target`
// instead (cudaTypedefs.h: PFN_cuCtxSynchronize_v13000 takes a CUcontext).
struct ProcAlias {
  const char* name;
  const char* target;
  int since;
};

constexpr ProcAlias kAliases[] = {
    {"cuCtxSynchronize", "cuCtxSynchronize_v2", 13000},
};

}  // namespace

// Resolves `symbol` (a base name like "cuMemAlloc", or cuda.h's versioned
// name like "cuMemAlloc_v2") to the fake's function with the signature
// that cuda.h gives that name, except that, as in the real driver, a base
// name whose ABI changed after cuda.h's declaration resolves to its newest
// ABI up to cudaVersion (kAliases: "cuCtxSynchronize" at 13000 is
// cuCtxSynchronize_v2(CUcontext)). Unknown: CUDA_ERROR_NOT_FOUND with
// CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; cudaVersion older than the ABI the
// fake serves: CUDA_ERROR_NOT_FOUND with
// CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT; cudaVersion above the
// driver's (FAKECUDA_DRIVER_VERSION): CUDA_ERROR_INVALID_VALUE. Needs no
// cuInit.
// Thread-safe (the table is constant).
CUresult Fake_cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                               cuuint64_t flags,
                               CUdriverProcAddressQueryResult* symbolStatus) {
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM |
      CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (symbol == nullptr || pfn == nullptr || (flags & ~kKnownFlags) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // cuda.h: "CUDA_ERROR_INVALID_VALUE ... if the requested version is
  // greater than the driver's": ask for the driver's version, not the
  // headers'.
  if (cudaVersion > DriverVersion()) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  for (const ProcAlias& alias : kAliases) {
    if (std::strcmp(symbol, alias.name) == 0 && cudaVersion >= alias.since) {
      symbol = alias.target;
    }
  }
  for (const ProcEntry& entry : kProcs) {
    if (std::strcmp(symbol, entry.name) != 0 &&
        std::strcmp(symbol, entry.versioned) != 0) {
      continue;
    }
    if (cudaVersion < entry.since) {
      if (symbolStatus != nullptr) {
        *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      }
      return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = entry.fn;
    if (symbolStatus != nullptr) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (symbolStatus != nullptr) {
    *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return CUDA_ERROR_NOT_FOUND;
}

}  // namespace fakecuda

// The exported symbols, with cuda.h's declarations.
#define FAKECUDA_EXPORT extern "C" __attribute__((visibility("default")))

FAKECUDA_EXPORT CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult* symbolStatus) {
  return fakecuda::Fake_cuGetProcAddress(symbol, pfn, cudaVersion, flags,
                                         symbolStatus);
}

FAKECUDA_EXPORT CUresult cuInit(unsigned int Flags) {
  return fakecuda::Fake_cuInit(Flags);
}

FAKECUDA_EXPORT CUresult cuDriverGetVersion(int* driverVersion) {
  return fakecuda::Fake_cuDriverGetVersion(driverVersion);
}

// Not a CUDA symbol: the emulation's count of kernel accesses that landed
// outside their allocation (fakegpu::StrayAccesses), for tests.
FAKECUDA_EXPORT uint64_t fakegpu_stray_accesses() {
  return fakegpu::StrayAccesses();
}

FAKECUDA_EXPORT uint64_t fakegpu_graph_launches() {
  return fakegpu::GraphLaunches();
}
