// AMD code objects as clang builds them (kernels/hip/samples.hipfb): the
// bundle entry for a device, the kernels' metadata, and the samples
// manifest checked against it; and malformed images refused without
// reading outside them.
#include "server/backend/hip/hip_code_object.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/modules/module_manifest.h"

namespace gpustream::backend {
namespace {

std::string ReadRunfile(const char* env) {
  const char* rel = std::getenv(env);
  if (rel == nullptr) return "";
  const char* root = std::getenv("TEST_SRCDIR");
  std::ifstream in(
      std::string(root != nullptr ? root : ".") + "/gpustream/" + rel,
      std::ios::binary);
  std::stringstream data;
  data << in.rdbuf();
  return data.str();
}

class HipCodeObjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bundle_ = ReadRunfile("GPUSTREAM_HIP_SAMPLES");
    if (bundle_.empty()) {
      GTEST_SKIP() << "this build has no AMDGPU clang: no samples bundle";
    }
  }
  std::string bundle_;
};

TEST_F(HipCodeObjectTest, FindsTheEntryForEachBuiltTargetOnly) {
  for (const char* arch : {"gfx90a", "gfx1030"}) {
    auto code = AmdCodeObjectFor(bundle_, arch);
    ASSERT_TRUE(code.ok()) << arch << ": " << code.status();
    EXPECT_TRUE(absl::StartsWith(*code,
                                 "\x7f"
                                 "ELF"))
        << arch;
  }
  auto missing = AmdCodeObjectFor(bundle_, "gfx942");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "the offload bundle has no code object for gfx942 (it has "
            "gfx1030, gfx90a)");
}

TEST_F(HipCodeObjectTest, ReadsEachKernelsArgumentsFromTheMetadata) {
  auto code = AmdCodeObjectFor(bundle_, "gfx90a");
  ASSERT_TRUE(code.ok()) << code.status();
  // A code object alone is taken as it is.
  EXPECT_EQ(AmdCodeObjectFor(*code, "gfx90a")->size(), code->size());
  auto kernels = ReadAmdKernels(*code);
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  const AmdKernel* fill = nullptr;
  const AmdKernel* spin = nullptr;
  for (const AmdKernel& k : *kernels) {
    if (k.name == "fill_u32") fill = &k;
    if (k.name == "spin_ns") spin = &k;
  }
  ASSERT_NE(fill, nullptr);
  ASSERT_EQ(fill->args.size(), 3u);  // Hidden arguments left out.
  EXPECT_EQ(fill->args[0].value_kind, "global_buffer");
  EXPECT_EQ(fill->args[0].size, 8u);
  EXPECT_EQ(fill->args[1].value_kind, "by_value");
  EXPECT_EQ(fill->args[1].offset, 8u);
  EXPECT_EQ(fill->args[1].size, 4u);
  EXPECT_EQ(fill->args[2].offset, 16u);
  EXPECT_EQ(fill->args[2].size, 8u);
  ASSERT_NE(spin, nullptr);
  EXPECT_EQ(spin->max_flat_workgroup_size, 64u);  // Its declared bound.
}

// The build-time check that the shared manifest says what the AMD code
// says, for every target built: count, sizes and kinds of every param.
TEST_F(HipCodeObjectTest, TheSamplesManifestMatchesTheCodeObjects) {
  const std::string text = ReadRunfile("GPUSTREAM_SAMPLES_MANIFEST");
  ASSERT_FALSE(text.empty());
  auto manifest =
      modules::ParseModuleManifest(text, "samples manifest", "samples");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  for (const char* arch : {"gfx90a", "gfx1030"}) {
    auto kernels = ReadAmdKernels(*AmdCodeObjectFor(bundle_, arch));
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    for (const auto& declared : manifest->kernels()) {
      const AmdKernel* found = nullptr;
      for (const AmdKernel& k : *kernels) {
        if (k.name == declared.name()) found = &k;
      }
      ASSERT_NE(found, nullptr) << arch << " lacks " << declared.name();
      std::vector<modules::BinaryParam> binary;
      for (const AmdKernelArg& a : found->args) {
        using Kind = modules::BinaryParam::Kind;
        binary.push_back({a.offset, a.size,
                          a.value_kind == "global_buffer" ? Kind::kBuffer
                          : a.value_kind == "by_value"    ? Kind::kValue
                                                          : Kind::kOther});
      }
      EXPECT_TRUE(modules::CheckKernelParams(declared, binary, arch).ok())
          << modules::CheckKernelParams(declared, binary, arch);
    }
  }
}

// Every truncation of the bundle and of its code object, and a few
// corruptions, are refused or read within bounds (ASan checks the reads).
TEST_F(HipCodeObjectTest, TruncatedAndCorruptImagesAreRefusedNotOverread) {
  auto code = AmdCodeObjectFor(bundle_, "gfx90a");
  ASSERT_TRUE(code.ok());
  const std::string object(*code);
  for (size_t n = 0; n < object.size(); n += 7) {
    const std::string cut = object.substr(0, n);
    auto kernels = ReadAmdKernels(cut);
    if (!kernels.ok()) {
      EXPECT_EQ(kernels.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  for (size_t n = 0; n < 4096 && n < bundle_.size(); n += 3) {
    const std::string cut = bundle_.substr(0, n);
    auto entry = AmdCodeObjectFor(cut, "gfx90a");
    if (!entry.ok()) {
      EXPECT_NE(entry.status().code(), absl::StatusCode::kOk);
    }
  }
  std::string corrupt = object;
  for (size_t i = 64; i < corrupt.size(); i += 97) {
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
    (void)ReadAmdKernels(corrupt);
  }
}

// The runtime is given no size: an ELF whose headers point outside it is
// refused before it gets there, and a code object is used only for the
// architecture its e_flags name.
TEST_F(HipCodeObjectTest, ElfHeadersAndArchitectureAreCheckedBeforeUse) {
  const std::string object(*AmdCodeObjectFor(bundle_, "gfx90a"));
  std::string far = object;
  const uint64_t beyond = uint64_t{1} << 40;
  std::memcpy(far.data() + 40, &beyond, 8);  // e_shoff
  auto refused = AmdCodeObjectFor(far, "gfx90a");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "malformed AMD code object: its ELF headers describe data outside "
            "it");
  auto other = AmdCodeObjectFor(object, "gfx1030");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(other.status().message(),
            "the code object is for gfx90a, not gfx1030");
  // A bundle whose chosen entry is inconsistent is refused too.
  std::string bundle = bundle_;
  const size_t at = bundle.find(object);
  ASSERT_NE(at, std::string::npos);
  std::memcpy(bundle.data() + at + 40, &beyond, 8);
  EXPECT_EQ(AmdCodeObjectFor(bundle, "gfx90a").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A bundle as clang writes it for several target IDs of one processor.
std::string Bundle(const std::vector<std::pair<std::string, std::string>>& e) {
  std::string header = "__CLANG_OFFLOAD_BUNDLE__";
  auto u64 = [](uint64_t v) {
    return std::string(reinterpret_cast<char*>(&v), 8);
  };
  header += u64(e.size());
  size_t header_size = header.size();
  for (const auto& [triple, data] : e) header_size += 24 + triple.size();
  std::string body;
  for (const auto& [triple, data] : e) {
    header += u64(header_size + body.size()) + u64(data.size()) +
              u64(triple.size()) + triple;
    body += data;
  }
  return header + body;
}

// ROCm's choice among entries of one processor: every feature an entry
// states must be the device's; the most specific such entry wins.
TEST_F(HipCodeObjectTest, TheEntryIsChosenByTargetIdAsRocmDoes) {
  const std::string object(*AmdCodeObjectFor(bundle_, "gfx90a"));
  const std::string bundle =
      Bundle({{"hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", object},
              {"hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", object},
              {"hipv4-amdgcn-amd-amdhsa--gfx90a", object}});
  auto entry_of = [&](const char* target) -> int {
    auto code = AmdCodeObjectFor(bundle, target);
    if (!code.ok()) return -1;
    return static_cast<int>(
        (code->data() - bundle.data() - (bundle.size() - 3 * object.size())) /
        object.size());
  };
  EXPECT_EQ(entry_of("gfx90a:sramecc+:xnack-"), 0);
  EXPECT_EQ(entry_of("gfx90a:sramecc+:xnack+"), 1);
  EXPECT_EQ(entry_of("gfx90a"), 2);  // A device stating no xnack.
  auto none = AmdCodeObjectFor(
      Bundle({{"hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", object}}),
      "gfx90a:sramecc+:xnack-");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(),
            "the offload bundle has no code object for gfx90a:sramecc+:xnack- "
            "(it has gfx90a:xnack+)");
}

TEST(HipCodeObjectMalformedTest, NeitherABundleNorAnElfIsInvalid) {
  auto entry = AmdCodeObjectFor("not a module", "gfx90a");
  EXPECT_EQ(entry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(entry.status().message(),
            "not an AMD code object or clang offload bundle");
  EXPECT_EQ(ReadAmdKernels("\x7f"
                           "ELF")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // A bundle header claiming more entries than it holds.
  std::string lying = "__CLANG_OFFLOAD_BUNDLE__";
  lying += std::string("\x05\0\0\0\0\0\0\0", 8);
  EXPECT_EQ(AmdCodeObjectFor(lying, "gfx90a").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpustream::backend
