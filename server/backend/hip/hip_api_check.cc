// Proves hip_api.h against HIP's own headers, where Debian's
// libamdhip64-dev installs them (@local_hip's hip_headers defines
// GPUSTREAM_HAVE_HIP_HEADERS): every entry point's type, every constant and
// the hipDeviceProp_t layout. Nothing here runs; a mismatch fails the build.
#ifdef GPUSTREAM_HAVE_HIP_HEADERS

#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <type_traits>

#include "server/backend/hip/hip_api.h"

namespace gpustream::backend::hipapi {
namespace {

// The header's type for each of ours, applied through pointers and
// function types: a function type of ours maps to exactly the header's.
template <typename T>
struct Real {
  using type = T;
};
template <typename T>
using RealT = typename Real<T>::type;
template <typename T>
struct Real<T*> {
  using type = RealT<T>*;
};
template <typename T>
struct Real<const T> {
  using type = const RealT<T>;
};
template <typename R, typename... A>
struct Real<R (*)(A...)> {
  using type = RealT<R> (*)(RealT<A>...);
};
template <>
struct Real<Error> {
  using type = ::hipError_t;
};
template <>
struct Real<Stream> {
  using type = ::ihipStream_t;
};
template <>
struct Real<Event> {
  using type = ::ihipEvent_t;
};
template <>
struct Real<Context> {
  using type = ::ihipCtx_t;
};
template <>
struct Real<Module> {
  using type = ::ihipModule_t;
};
template <>
struct Real<Function> {
  using type = ::ihipModuleSymbol_t;
};
template <>
struct Real<Graph> {
  using type = ::ihipGraph;
};
template <>
struct Real<GraphNode> {
  using type = ::hipGraphNode;
};
template <>
struct Real<GraphExec> {
  using type = ::hipGraphExec;
};
template <>
struct Real<StreamCaptureMode> {
  using type = ::hipStreamCaptureMode;
};
template <>
struct Real<DeviceAttribute> {
  using type = ::hipDeviceAttribute_t;
};
template <>
struct Real<FunctionAttribute> {
  using type = ::hipFunction_attribute;
};
template <>
struct Real<DeviceProp> {
  using type = ::hipDeviceProp_t;
};

// Enumerators of two enums compare as their values.
constexpr int I(auto e) { return static_cast<int>(e); }

// hipCtxSetCurrent is deprecated in HIP (the primary context API stays):
// naming it must not warn.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
// The header declares some names more than once in C++ (templates,
// overloads): the cast picks the declaration with exactly our type, and
// fails to compile where there is none.
#define GPUSTREAM_HIP_CHECK(name, ret, params)               \
  [[maybe_unused]] constexpr RealT<ret(*) params> k_##name = \
      static_cast<RealT<ret(*) params>>(&::name);
GPUSTREAM_HIP_ENTRY_POINTS(GPUSTREAM_HIP_CHECK)
#undef GPUSTREAM_HIP_CHECK
#pragma GCC diagnostic pop

static_assert(I(kSuccess) == I(::hipSuccess));
static_assert(I(kErrorInvalidValue) == I(::hipErrorInvalidValue));
static_assert(I(kErrorOutOfMemory) == I(::hipErrorOutOfMemory));
static_assert(I(kErrorNotInitialized) == I(::hipErrorNotInitialized));
static_assert(I(kErrorDeinitialized) == I(::hipErrorDeinitialized));
static_assert(I(kErrorNoDevice) == I(::hipErrorNoDevice));
static_assert(I(kErrorInvalidDevice) == I(::hipErrorInvalidDevice));
static_assert(I(kErrorInvalidImage) == I(::hipErrorInvalidImage));
static_assert(I(kErrorInvalidContext) == I(::hipErrorInvalidContext));
static_assert(I(kErrorNoBinaryForGpu) == I(::hipErrorNoBinaryForGpu));
static_assert(I(kErrorECCNotCorrectable) == I(::hipErrorECCNotCorrectable));
static_assert(I(kErrorInvalidKernelFile) == I(::hipErrorInvalidKernelFile));
static_assert(I(kErrorInvalidHandle) == I(::hipErrorInvalidHandle));
static_assert(I(kErrorNotFound) == I(::hipErrorNotFound));
static_assert(I(kErrorNotReady) == I(::hipErrorNotReady));
static_assert(I(kErrorIllegalAddress) == I(::hipErrorIllegalAddress));
static_assert(I(kErrorLaunchOutOfResources) ==
              I(::hipErrorLaunchOutOfResources));
static_assert(I(kErrorLaunchTimeOut) == I(::hipErrorLaunchTimeOut));
static_assert(I(kErrorContextIsDestroyed) == I(::hipErrorContextIsDestroyed));
static_assert(I(kErrorAssert) == I(::hipErrorAssert));
static_assert(I(kErrorLaunchFailure) == I(::hipErrorLaunchFailure));
static_assert(I(kErrorNotSupported) == I(::hipErrorNotSupported));
static_assert(I(kErrorIllegalState) == I(::hipErrorIllegalState));
static_assert(I(kErrorStreamCaptureUnsupported) ==
              I(::hipErrorStreamCaptureUnsupported));
static_assert(I(kErrorStreamCaptureInvalidated) ==
              I(::hipErrorStreamCaptureInvalidated));
static_assert(I(kErrorStreamCaptureWrongThread) ==
              I(::hipErrorStreamCaptureWrongThread));
static_assert(I(kCaptureModeGlobal) == I(::hipStreamCaptureModeGlobal));
static_assert(I(kCaptureModeThreadLocal) ==
              I(::hipStreamCaptureModeThreadLocal));
static_assert(I(kCaptureModeRelaxed) == I(::hipStreamCaptureModeRelaxed));
static_assert(I(kErrorUnknown) == I(::hipErrorUnknown));
static_assert(I(kErrorRuntimeOther) == I(::hipErrorRuntimeOther));

static_assert(I(kAttrComputeCapabilityMajor) ==
              I(::hipDeviceAttributeComputeCapabilityMajor));
static_assert(I(kAttrMaxBlockDimX) == I(::hipDeviceAttributeMaxBlockDimX));
static_assert(I(kAttrMaxBlockDimY) == I(::hipDeviceAttributeMaxBlockDimY));
static_assert(I(kAttrMaxBlockDimZ) == I(::hipDeviceAttributeMaxBlockDimZ));
static_assert(I(kAttrMaxGridDimX) == I(::hipDeviceAttributeMaxGridDimX));
static_assert(I(kAttrMaxGridDimY) == I(::hipDeviceAttributeMaxGridDimY));
static_assert(I(kAttrMaxGridDimZ) == I(::hipDeviceAttributeMaxGridDimZ));
static_assert(I(kAttrMaxThreadsPerBlock) ==
              I(::hipDeviceAttributeMaxThreadsPerBlock));
static_assert(I(kAttrMultiprocessorCount) ==
              I(::hipDeviceAttributeMultiprocessorCount));
static_assert(I(kAttrMaxSharedMemoryPerBlock) ==
              I(::hipDeviceAttributeMaxSharedMemoryPerBlock));
static_assert(I(kAttrMemoryPoolsSupported) ==
              I(::hipDeviceAttributeMemoryPoolsSupported));
static_assert(I(kAttrCanUseStreamWaitValue) ==
              I(::hipDeviceAttributeCanUseStreamWaitValue));

static_assert(I(kFuncMaxThreadsPerBlock) ==
              I(::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
static_assert(I(kFuncSharedSizeBytes) ==
              I(::HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES));
static_assert(I(kFuncMaxDynamicSharedSizeBytes) ==
              I(::HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES));

static_assert(kStreamNonBlocking == hipStreamNonBlocking);
static_assert(kEventDisableTiming == hipEventDisableTiming);
static_assert(kHostMallocPortable == hipHostMallocPortable);
static_assert(kHostMallocMapped == hipHostMallocMapped);

static_assert(DeviceProp::kSize == sizeof(::hipDeviceProp_t));
static_assert(DeviceProp::kGcnArchNameOffset ==
              offsetof(::hipDeviceProp_t, gcnArchName));
static_assert(DeviceProp::kGcnArchNameSize ==
              sizeof(::hipDeviceProp_t::gcnArchName));
static_assert(sizeof(DeviceProp) == sizeof(::hipDeviceProp_t));
static_assert(sizeof(Device) == sizeof(::hipDevice_t));

}  // namespace
}  // namespace gpustream::backend::hipapi

#endif  // GPUSTREAM_HAVE_HIP_HEADERS
