// Contexts of the caller's own and green contexts (SM partitions), as CUDA
// serves them: CUdevResource carries the emulation's SmResource in the
// padding the header reserves for the driver ("should not be directly
// modified outside of the API that created it"), with the public smCount,
// minSmPartitionSize and smCoscheduledAlignment filled in.
#include <cstring>
#include <vector>

#include "tests/fake_cuda/fake_api.h"
#include "tests/fake_cuda/fake_cuda_skin.h"

namespace fakecuda {
namespace gpu = fakegpu;
namespace {

static_assert(gpu::kGreenCtxDefaultStream == CU_GREEN_CTX_DEFAULT_STREAM);
static_assert(sizeof(gpu::SmResource) <=
              sizeof(CUdevResource::_internal_padding));

// The emulation's resource in a CUdevResource, or an invalid one (device
// -1) for anything no call made.
gpu::SmResource FromCu(const CUdevResource& resource) {
  gpu::SmResource sm;
  if (resource.type != CU_DEV_RESOURCE_TYPE_SM) return sm;
  std::memcpy(&sm, resource._internal_padding, sizeof(sm));
  return sm;
}

void ToCu(const gpu::SmResource& sm, CUdevResource* resource) {
  std::memset(resource, 0, sizeof(*resource));
  resource->type = CU_DEV_RESOURCE_TYPE_SM;
  std::memcpy(resource->_internal_padding, &sm, sizeof(sm));
  resource->sm.smCount = sm.sm_count;
  resource->sm.minSmPartitionSize = sm.min_partition;
  resource->sm.smCoscheduledAlignment = sm.alignment;
}

}  // namespace

// Execution affinity and CIG parameters are not modelled: refused, never
// ignored.
CUresult Fake_cuCtxCreate(CUcontext* pctx, CUctxCreateParams* params,
                          unsigned int flags, CUdevice dev) {
  if (params != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return ToCu(
      gpu::CtxCreate(HandleCast<gpu::ContextHandle*>(pctx), flags, dev));
}

CUresult Fake_cuCtxPopCurrent(CUcontext* pctx) {
  return ToCu(gpu::CtxPopCurrent(HandleCast<gpu::ContextHandle*>(pctx)));
}

CUresult Fake_cuCtxDestroy(CUcontext ctx) {
  return ToCu(gpu::CtxDestroy(HandleCast<gpu::ContextHandle>(ctx)));
}

CUresult Fake_cuDeviceGetDevResource(CUdevice device, CUdevResource* resource,
                                     CUdevResourceType type) {
  if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  gpu::SmResource sm;
  if (CUresult r = ToCu(gpu::DeviceGetSmResource(device, &sm));
      r != CUDA_SUCCESS) {
    return r;
  }
  ToCu(sm, resource);
  return CUDA_SUCCESS;
}

CUresult Fake_cuDevSmResourceSplitByCount(
    CUdevResource* result, unsigned int* nbGroups, const CUdevResource* input,
    CUdevResource* remaining, unsigned int useFlags, unsigned int minCount) {
  if (input == nullptr || nbGroups == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (input->type != CU_DEV_RESOURCE_TYPE_SM) {
    return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  }
  const gpu::SmResource in = FromCu(*input);
  if (result == nullptr) {
    return ToCu(gpu::SmResourceSplitByCount(nullptr, nbGroups, &in, nullptr,
                                            useFlags, minCount));
  }
  std::vector<gpu::SmResource> groups(*nbGroups);
  gpu::SmResource rest;
  unsigned made = *nbGroups;
  if (CUresult r = ToCu(gpu::SmResourceSplitByCount(groups.data(), &made, &in,
                                                    &rest, useFlags, minCount));
      r != CUDA_SUCCESS) {
    return r;
  }
  for (unsigned i = 0; i < made; ++i) ToCu(groups[i], &result[i]);
  if (remaining != nullptr) ToCu(rest, remaining);
  *nbGroups = made;
  return CUDA_SUCCESS;
}

CUresult Fake_cuDevResourceGenerateDesc(CUdevResourceDesc* phDesc,
                                        CUdevResource* resources,
                                        unsigned int nbResources) {
  if (resources == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<gpu::SmResource> sms;
  for (unsigned i = 0; i < nbResources; ++i) {
    if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM) {
      return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    }
    sms.push_back(FromCu(resources[i]));
  }
  return ToCu(gpu::ResourceGenerateDesc(
      HandleCast<gpu::ResourceDescHandle*>(phDesc), sms.data(), nbResources));
}

CUresult Fake_cuGreenCtxCreate(CUgreenCtx* phCtx, CUdevResourceDesc desc,
                               CUdevice dev, unsigned int flags) {
  return ToCu(gpu::GreenCtxCreate(HandleCast<gpu::GreenCtxHandle*>(phCtx),
                                  HandleCast<gpu::ResourceDescHandle>(desc),
                                  dev, flags));
}

CUresult Fake_cuGreenCtxDestroy(CUgreenCtx hCtx) {
  return ToCu(gpu::GreenCtxDestroy(HandleCast<gpu::GreenCtxHandle>(hCtx)));
}

CUresult Fake_cuGreenCtxStreamCreate(CUstream* phStream, CUgreenCtx greenCtx,
                                     unsigned int flags, int priority) {
  return ToCu(gpu::GreenCtxStreamCreate(
      HandleCast<gpu::StreamHandle*>(phStream),
      HandleCast<gpu::GreenCtxHandle>(greenCtx), flags, priority));
}

}  // namespace fakecuda
