// Tests of libfakecuda.so's contexts of the caller's own (cuCtxCreate) and
// green contexts: the rules cuda.h states for SM resources, their splits,
// descriptors and green-context streams.
#include <vector>

#include "gtest/gtest.h"
#include "tests/fake_cuda/fake_cuda_testing.h"

namespace fakecuda_test {
namespace {

using FakeCudaContextsTest = FakeCudaTest;

// A created context is pushed current and has memory of its own (copies,
// by unified addressing, reach any live allocation; kernels only their
// context's); popping it makes the one below current again; destroying it
// while current pops it, frees its memory and leaves the handle dead; a
// primary context is never destroyed that way.
TEST_F(FakeCudaContextsTest, ACreatedContextHasItsOwnMemoryAndDies) {
  CUdeviceptr primary_memory = Alloc(64);
  CUcontext own = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.CtxCreate(&own, nullptr, 0, 0));
  CUcontext current = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.CtxGetCurrent(&current));
  EXPECT_EQ(current, own);
  CUstream stream = NewStream();
  const uint32_t word = 7;
  CUdeviceptr own_memory = Alloc(64);
  EXPECT_CU(CUDA_SUCCESS, cu.MemcpyHtoDAsync(own_memory, &word, 4, stream));
  EXPECT_CU(CUDA_SUCCESS, Finish(stream));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cu.CtxDestroy(ctx_));
  CUcontext popped = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.CtxPopCurrent(&popped));
  EXPECT_EQ(popped, own);
  ASSERT_CU(CUDA_SUCCESS, cu.CtxGetCurrent(&current));
  EXPECT_EQ(current, ctx_);
  ASSERT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(own));
  ASSERT_CU(CUDA_SUCCESS, cu.CtxDestroy(own));
  ASSERT_CU(CUDA_SUCCESS, cu.CtxGetCurrent(&current));
  EXPECT_EQ(current, nullptr);  // SetCurrent replaced the top: none below.
  EXPECT_CU(CUDA_ERROR_CONTEXT_IS_DESTROYED, cu.CtxSetCurrent(own));
  EXPECT_CU(CUDA_ERROR_CONTEXT_IS_DESTROYED, cu.CtxDestroy(own));
  ASSERT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(ctx_));
  CUstream primary_stream = NewStream();
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.MemcpyHtoDAsync(own_memory, &word, 4, primary_stream));
  EXPECT_CU(CUDA_SUCCESS, cu.StreamDestroy(primary_stream));
  EXPECT_CU(CUDA_SUCCESS, cu.MemFree(primary_memory));
}

// Hopper's rules: at least 8 SMs a group, in multiples of 8; equal groups
// from one split; a group is not split again; a descriptor joins groups of
// one split only.
TEST_F(FakeCudaContextsTest, SmSplitsFollowTheDevicesGranularity) {
  CUdevResource sms;
  ASSERT_CU(CUDA_SUCCESS,
            cu.DeviceGetDevResource(0, &sms, CU_DEV_RESOURCE_TYPE_SM));
  EXPECT_EQ(sms.sm.smCount, 132u);
  EXPECT_EQ(sms.sm.minSmPartitionSize, 8u);
  EXPECT_EQ(sms.sm.smCoscheduledAlignment, 8u);
  unsigned groups = 0;
  ASSERT_CU(CUDA_SUCCESS, cu.DevSmResourceSplitByCount(nullptr, &groups, &sms,
                                                       nullptr, 0, 5));
  EXPECT_EQ(groups, 16u);  // 5 rounds up to 8: 132 / 8
  ASSERT_CU(CUDA_SUCCESS, cu.DevSmResourceSplitByCount(nullptr, &groups, &sms,
                                                       nullptr, 0, 12));
  EXPECT_EQ(groups, 8u);  // 12 rounds up to 16
  std::vector<CUdevResource> split(20);
  CUdevResource rest;
  groups = 20;
  ASSERT_CU(CUDA_SUCCESS, cu.DevSmResourceSplitByCount(split.data(), &groups,
                                                       &sms, &rest, 0, 8));
  EXPECT_EQ(groups, 16u);
  EXPECT_EQ(split[0].sm.smCount, 8u);
  EXPECT_EQ(rest.sm.smCount, 4u);
  CUdevResource again[2];
  unsigned two = 2;
  EXPECT_CU(
      CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
      cu.DevSmResourceSplitByCount(again, &two, &split[0], nullptr, 0, 8));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.DevSmResourceSplitByCount(again, &two, &sms, nullptr, 0, 200));
  std::vector<CUdevResource> other(2);
  two = 2;
  ASSERT_CU(CUDA_SUCCESS, cu.DevSmResourceSplitByCount(other.data(), &two, &sms,
                                                       nullptr, 0, 8));
  CUdevResource mixed[2] = {split[0], other[0]};
  CUdevResourceDesc desc = nullptr;
  EXPECT_CU(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
            cu.DevResourceGenerateDesc(&desc, mixed, 2));
  ASSERT_CU(CUDA_SUCCESS, cu.DevResourceGenerateDesc(&desc, split.data(), 3));
  CUgreenCtx green = nullptr;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.GreenCtxCreate(&green, desc, 0, 0));
  ASSERT_CU(CUDA_SUCCESS,
            cu.GreenCtxCreate(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
  CUstream stream = nullptr;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cu.GreenCtxStreamCreate(&stream, green, 0, 0));
  ASSERT_CU(CUDA_SUCCESS,
            cu.GreenCtxStreamCreate(&stream, green, CU_STREAM_NON_BLOCKING, 0));
  EXPECT_CU(CUDA_SUCCESS, cu.StreamDestroy(stream));
  EXPECT_CU(CUDA_SUCCESS, cu.GreenCtxDestroy(green));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cu.GreenCtxDestroy(green));
}

// A green context lives in the primary context it retained: a reset of
// that context destroys it with everything else, and it makes no stream
// after.
TEST_F(FakeCudaContextsTest, AGreenContextDiesWithItsPrimaryContextsReset) {
  CUdevResource sms;
  ASSERT_CU(CUDA_SUCCESS,
            cu.DeviceGetDevResource(0, &sms, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource group;
  unsigned one = 1;
  ASSERT_CU(CUDA_SUCCESS,
            cu.DevSmResourceSplitByCount(&group, &one, &sms, nullptr, 0, 8));
  CUdevResourceDesc desc = nullptr;
  ASSERT_CU(CUDA_SUCCESS, cu.DevResourceGenerateDesc(&desc, &group, 1));
  CUgreenCtx green = nullptr;
  ASSERT_CU(CUDA_SUCCESS,
            cu.GreenCtxCreate(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
  ASSERT_CU(CUDA_SUCCESS, cu.PrimaryCtxReset(0));
  CUstream stream = nullptr;
  EXPECT_CU(CUDA_ERROR_CONTEXT_IS_DESTROYED,
            cu.GreenCtxStreamCreate(&stream, green, CU_STREAM_NON_BLOCKING, 0));
  EXPECT_CU(CUDA_SUCCESS, cu.GreenCtxDestroy(green));
  // The fixture's context was the one reset: take the new one.
  ASSERT_CU(CUDA_SUCCESS, cu.PrimaryCtxRelease(0));
  ASSERT_CU(CUDA_SUCCESS, cu.PrimaryCtxRetain(&ctx_, 0));
  ASSERT_CU(CUDA_SUCCESS, cu.CtxSetCurrent(ctx_));
}

}  // namespace
}  // namespace fakecuda_test
