// Tests of launch-argument packing: offsets, sizes, alignment.
#include "server/backend/gpu/gpu_args.h"

#include <cstring>

#include "gtest/gtest.h"

namespace gpustream::backend {
namespace {

TEST(GpuArgsTest, PacksEachArgumentAtItsOffset) {
  KernelSignature saxpy;
  saxpy.params = {ParamKind::kF32, ParamKind::kBuffer, ParamKind::kBuffer,
                  ParamKind::kU64};
  saxpy.layout = {{4, 0}, {8, 8}, {8, 16}, {8, 24}};
  std::vector<KernelArg> args = {2.5f, BufferArg{nullptr, 16},
                                 BufferArg{nullptr, 32}, uint64_t{1000}};
  GpuArgBlock block = PackArgs(saxpy, args, [](const BufferArg& b) {
    return uint64_t{0x7000000000} + b.offset;
  });
  ASSERT_EQ(block.bytes.size() * 8, 32u);
  ASSERT_EQ(block.pointers.size(), 4u);
  auto* base = reinterpret_cast<std::byte*>(block.bytes.data());
  EXPECT_EQ(block.pointers[0], base);
  EXPECT_EQ(block.pointers[1], base + 8);
  EXPECT_EQ(block.pointers[3], base + 24);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % 8, 0u);
  float alpha;
  std::memcpy(&alpha, block.pointers[0], 4);
  EXPECT_EQ(alpha, 2.5f);
  uint32_t padding;
  std::memcpy(&padding, base + 4, 4);
  EXPECT_EQ(padding, 0u);  // The gap after the float is zeroed.
  uint64_t x, y, n;
  std::memcpy(&x, block.pointers[1], 8);
  std::memcpy(&y, block.pointers[2], 8);
  std::memcpy(&n, block.pointers[3], 8);
  EXPECT_EQ(x, 0x7000000010u);
  EXPECT_EQ(y, 0x7000000020u);
  EXPECT_EQ(n, 1000u);
}

TEST(GpuArgsTest, BytesUseTheDeclaredSizeAndSmallScalarsTheirOwn) {
  KernelSignature k;
  k.params = {ParamKind::kI32, ParamKind::kBytes, ParamKind::kF64};
  k.layout = {{4, 0}, {12, 4}, {8, 16}};
  std::vector<KernelArg> args = {int32_t{-7}, std::string("abcdefghijkl"), 1.5};
  GpuArgBlock block = PackArgs(k, args, [](const BufferArg&) { return 0; });
  ASSERT_EQ(block.bytes.size() * 8, 24u);
  int32_t i;
  std::memcpy(&i, block.pointers[0], 4);
  EXPECT_EQ(i, -7);
  EXPECT_EQ(std::memcmp(block.pointers[1], "abcdefghijkl", 12), 0);
  double d;
  std::memcpy(&d, block.pointers[2], 8);
  EXPECT_EQ(d, 1.5);
}

TEST(GpuArgsTest, NoParamsGivesAnEmptyBlock) {
  KernelSignature noop;
  GpuArgBlock block = PackArgs(noop, {}, [](const BufferArg&) { return 0; });
  EXPECT_TRUE(block.pointers.empty());
}

}  // namespace
}  // namespace gpustream::backend
