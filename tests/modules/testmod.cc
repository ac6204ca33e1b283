// An operator-style CPU module for tests: loaded with --modules.
#include <cstdint>

#include "kernels/cpu/gpustream_cpu_module.h"

namespace {

// out[i] = start + i * step: proves argument order and the i index.
int IotaI64(const GsLaunch* l) {
  const GsSpan& out = l->args[0].value.span;
  const int64_t start = l->args[1].value.i64;
  const double step = l->args[2].value.f64;
  const uint64_t n = out.size / 8;
  const uint64_t threads = uint64_t{l->grid.x} * l->block.x;
  auto* p = static_cast<int64_t*>(out.data);
  for (uint64_t i = 0; i < n && i < threads; ++i) {
    p[i] = start + static_cast<int64_t>(step * static_cast<double>(i));
  }
  return 0;
}

// out[0] = the sum of the bytes of the blob (a BYTES parameter).
int SumBytes(const GsLaunch* l) {
  const GsSpan& out = l->args[0].value.span;
  const GsSpan& blob = l->args[1].value.span;
  if (out.size < 8) {
    return 1;
  }
  uint64_t sum = 0;
  for (uint64_t i = 0; i < blob.size; ++i) {
    sum += static_cast<const unsigned char*>(blob.data)[i];
  }
  *static_cast<uint64_t*>(out.data) = sum;
  return 0;
}

constexpr GsParamKind kIota[] = {GS_PARAM_BUFFER, GS_PARAM_I64, GS_PARAM_F64};
constexpr GsParamKind kSum[] = {GS_PARAM_BUFFER, GS_PARAM_BYTES};
// sum_bytes writes one 8-byte word. iota_i64 declares no extent (it bounds
// itself by its span): an unchecked kernel, which with tenants configured
// only tenants with allow_unchecked_kernels may launch.
constexpr GsExtent kSumExtents[] = {{1, -1, 8, 0, 0}, {0, -1, 0, 0, 0}};
constexpr GsKernelDef kKernels[] = {{"iota_i64", kIota, 3, IotaI64},
                                    {"sum_bytes", kSum, 2, SumBytes}};
constexpr const GsExtent* kExtents[] = {nullptr, kSumExtents};
constexpr GsModuleDef kModule = {GS_CPU_MODULE_ABI_VERSION, "testmod", kKernels,
                                 2, kExtents};

}  // namespace

extern "C" __attribute__((visibility("default"))) const GsModuleDef*
gpustream_cpu_module(void) {
  return &kModule;
}
