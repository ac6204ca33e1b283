// Tests of module manifest parsing, validation and the binary param check.
#include "server/modules/module_manifest.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpustream::modules {
namespace {

using ::testing::HasSubstr;

constexpr absl::string_view kOrigin = "/opt/m/k.manifest.textproto";

std::string SrcPath(absl::string_view relative) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/gpustream/", relative);
}

// The code and message of parsing `text` with kOrigin and default name "k".
absl::Status ParseError(absl::string_view text) {
  return ParseModuleManifest(text, kOrigin, "k").status();
}

TEST(ModuleManifestTest, SamplesManifestDeclaresTheNineKernels) {
  const std::string path = SrcPath("kernels/cuda/samples.manifest.textproto");
  auto manifest = ReadModuleManifest(path, "ignored");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->name(), "samples");
  using K = v1::ParamKind;
  const std::vector<std::pair<std::string, std::vector<K>>> expected = {
      {"fill_u32",
       {v1::PARAM_KIND_BUFFER, v1::PARAM_KIND_U32, v1::PARAM_KIND_U64}},
      {"vector_add_f32",
       {v1::PARAM_KIND_BUFFER, v1::PARAM_KIND_BUFFER, v1::PARAM_KIND_BUFFER,
        v1::PARAM_KIND_U64}},
      {"saxpy_f32",
       {v1::PARAM_KIND_F32, v1::PARAM_KIND_BUFFER, v1::PARAM_KIND_BUFFER,
        v1::PARAM_KIND_U64}},
      {"add_u64", {v1::PARAM_KIND_BUFFER, v1::PARAM_KIND_U64}},
      {"spin_ns", {v1::PARAM_KIND_U64}},
      {"noop", {}},
      {"trap", {}},
      {"block_rank_u32", {v1::PARAM_KIND_BUFFER}},
      {"grid_barrier_u32", {v1::PARAM_KIND_BUFFER}},
  };
  ASSERT_EQ(manifest->kernels_size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    const v1::KernelManifest& kernel = manifest->kernels(k);
    EXPECT_EQ(kernel.name(), expected[k].first);
    ASSERT_EQ(kernel.params_size(), expected[k].second.size()) << kernel.name();
    for (size_t p = 0; p < expected[k].second.size(); ++p) {
      EXPECT_EQ(kernel.params(p).kind(), expected[k].second[p])
          << kernel.name() << " param " << p;
      EXPECT_FALSE(kernel.params(p).name().empty());
    }
  }
}

// Every BUFFER param of the samples says how far the kernel reaches.
TEST(ModuleManifestTest, SamplesDeclareEveryExtent) {
  auto manifest = ReadModuleManifest(
      SrcPath("kernels/cuda/samples.manifest.textproto"), "ignored");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  for (const v1::KernelManifest& kernel : manifest->kernels()) {
    for (const v1::ParamManifest& param : kernel.params()) {
      EXPECT_EQ(param.has_extent(), param.kind() == v1::PARAM_KIND_BUFFER)
          << kernel.name() << " " << param.name();
      if (!param.has_extent()) continue;
      const v1::BufferExtent& e = param.extent();
      if (kernel.name() == "block_rank_u32" ||
          kernel.name() == "grid_barrier_u32") {
        // One or two words per block, declared per thread.
        EXPECT_EQ(e.bytes_per_thread(),
                  kernel.name() == "block_rank_u32" ? 4u : 8u);
        continue;
      }
      EXPECT_EQ(e.bytes_per_thread(), 0u);
      if (kernel.name() == "add_u64") {
        EXPECT_EQ(e.bytes(), 8u);  // One counter.
        EXPECT_TRUE(e.count_param().empty());
      } else {  // 4 bytes per element of n.
        EXPECT_EQ(e.bytes(), 0u) << kernel.name();
        EXPECT_EQ(e.bytes_per_element(), 4u) << kernel.name();
        EXPECT_EQ(e.count_param(), "n") << kernel.name();
        EXPECT_EQ(CountParamIndex(kernel, e), kernel.params_size() - 1);
      }
    }
  }
}

TEST(ModuleManifestTest, ExtentsAreOnlyForBuffersCountingIntegers) {
  const auto kernel = [](absl::string_view extent) {
    return absl::StrCat(
        "kernels { name: \"k\" params { name: \"out\" kind: "
        "PARAM_KIND_BUFFER ",
        extent,
        " } params { name: \"x\" kind: PARAM_KIND_F32 } params { name: "
        "\"n\" kind: PARAM_KIND_U64 } }");
  };
  EXPECT_TRUE(ParseError(kernel("extent { bytes_per_element: 4 count_param: "
                                "\"n\" bytes: 16 bytes_per_thread: 2 }"))
                  .ok());
  const std::pair<std::string, std::string> bad[] = {
      {"extent { bytes_per_element: 4 count_param: \"x\" }",
       "counts param 'x', a F32"},
      {"extent { bytes_per_element: 4 count_param: \"m\" }",
       "counts param 'm', which the kernel does not have"},
      {"extent { bytes_per_element: 4 }",
       "bytes_per_element without count_param"},
      {"extent { count_param: \"n\" }",
       "count_param without bytes_per_element"},
  };
  for (const auto& [extent, error] : bad) {
    const absl::Status s = ParseError(kernel(extent));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << extent;
    EXPECT_THAT(s.message(), HasSubstr(error));
    EXPECT_THAT(s.message(), HasSubstr("kernel k param 0 (out)"));
  }
  const absl::Status on_value = ParseError(
      "kernels { name: \"k\" params { name: \"v\" kind: PARAM_KIND_U32 "
      "extent { bytes: 4 } } }");
  EXPECT_EQ(on_value.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(on_value.message(), HasSubstr("is U32 but declares an extent"));
}

TEST(ModuleManifestTest, SamplesMatchTheirCudaSignatures) {
  // What cuFuncGetParamInfo reports for samples.cu (offsets, sizes).
  auto manifest = ReadModuleManifest(
      SrcPath("kernels/cuda/samples.manifest.textproto"), "");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  const std::vector<std::vector<BinaryParam>> binary = {
      {{0, 8}, {8, 4}, {16, 8}},           // fill_u32
      {{0, 8}, {8, 8}, {16, 8}, {24, 8}},  // vector_add_f32
      {{0, 4}, {8, 8}, {16, 8}, {24, 8}},  // saxpy_f32
      {{0, 8}, {8, 8}},                    // add_u64
      {{0, 8}},                            // spin_ns
      {},                                  // noop
      {},                                  // trap
      {{0, 8}},                            // block_rank_u32
      {{0, 8}},                            // grid_barrier_u32
  };
  ASSERT_EQ(manifest->kernels_size(), binary.size());
  for (size_t k = 0; k < binary.size(); ++k) {
    EXPECT_TRUE(CheckKernelParams(manifest->kernels(k), binary[k], "s").ok())
        << manifest->kernels(k).name();
  }
}

TEST(ModuleManifestTest, EmptyNameTakesTheDefault) {
  auto manifest =
      ParseModuleManifest("kernels { name: \"noop\" }", kOrigin, "fallback");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->name(), "fallback");
  auto named = ParseModuleManifest("name: \"m\"", kOrigin, "fallback");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->name(), "m");
  EXPECT_EQ(named->kernels_size(), 0);
}

TEST(ModuleManifestTest, NoNameAtAllIsInvalid) {
  auto manifest = ParseModuleManifest("", kOrigin, "");
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(manifest.status().message(), HasSubstr(kOrigin));
  EXPECT_THAT(manifest.status().message(), HasSubstr("no name"));
}

TEST(ModuleManifestTest, KernelWithoutNameIsInvalid) {
  const absl::Status status = ParseError(
      "kernels { name: \"a\" } kernels { params { kind: "
      "PARAM_KIND_U32 } }");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            absl::StrCat(kOrigin, ": the kernel at index 1 has no name"));
}

TEST(ModuleManifestTest, DuplicateKernelIsInvalid) {
  const absl::Status status =
      ParseError("kernels { name: \"a\" } kernels { name: \"a\" }");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            absl::StrCat(kOrigin, ": kernel a is declared twice"));
}

TEST(ModuleManifestTest, ParamWithoutKindIsInvalid) {
  const absl::Status status = ParseError(
      "kernels { name: \"a\" params { name: \"x\" kind: PARAM_KIND_U32 } "
      "params { name: \"y\" } }");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), absl::StrCat(kOrigin,
                                           ": kernel a param 1 (y) has no kind "
                                           "(PARAM_KIND_UNSPECIFIED)"));
}

TEST(ModuleManifestTest, UnnamedParamIsNamedByIndex) {
  const absl::Status status = ParseError("kernels { name: \"a\" params {} }");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(": kernel a param 0 has no kind"));
}

TEST(ModuleManifestTest, UnknownNumericKindIsInvalid) {
  // Text format accepts an unknown number for a proto3 (open) enum; the
  // validation must not.
  const absl::Status status =
      ParseError("kernels { name: \"a\" params { name: \"x\" kind: 99 } }");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      status.message(),
      absl::StrCat(kOrigin, ": kernel a param 0 (x) has unknown kind 99"));
}

TEST(ModuleManifestTest, BytesWithoutSizeIsInvalid) {
  const absl::Status status = ParseError(
      "kernels { name: \"a\" params { name: \"s\" kind: PARAM_KIND_BYTES } }");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            absl::StrCat(kOrigin,
                         ": kernel a param 0 (s) is BYTES but has no "
                         "size_bytes (> 0)"));
}

TEST(ModuleManifestTest, SizeOnOtherKindsIsInvalid) {
  const absl::Status status = ParseError(
      "kernels { name: \"a\" params { name: \"v\" kind: "
      "PARAM_KIND_U32 size_bytes: 4 } }");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            absl::StrCat(kOrigin,
                         ": kernel a param 0 (v) is U32 but sets size_bytes "
                         "(4), which only BYTES params take"));
}

TEST(ModuleManifestTest, BytesWithSizeIsValid) {
  auto manifest = ParseModuleManifest(
      "kernels { name: \"a\" params { name: \"s\" kind: PARAM_KIND_BYTES "
      "size_bytes: 24 } }",
      kOrigin, "k");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(ParamSize(manifest->kernels(0).params(0)), 24u);
}

TEST(ModuleManifestTest, SyntaxErrorsCarryLineAndColumn) {
  const absl::Status status =
      ParseError("name: \"m\"\nkernels {\n  name: \"a\"\n  parms {}\n}\n");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(kOrigin, ":4:")));
  EXPECT_THAT(status.message(), HasSubstr("parms"));

  const absl::Status unclosed = ParseError("kernels {\n  name: \"a\"\n");
  EXPECT_EQ(unclosed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unclosed.message(), HasSubstr(absl::StrCat(kOrigin, ":3:")));

  const absl::Status bad_kind =
      ParseError("kernels { name: \"a\" params { kind: PARAM_KIND_U16 } }");
  EXPECT_EQ(bad_kind.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_kind.message(), HasSubstr(absl::StrCat(kOrigin, ":1:")));
  EXPECT_THAT(bad_kind.message(), HasSubstr("PARAM_KIND_U16"));
}

TEST(ModuleManifestTest, ParamSizeOfEveryKind) {
  const std::vector<std::pair<v1::ParamKind, uint32_t>> sizes = {
      {v1::PARAM_KIND_BUFFER, 8}, {v1::PARAM_KIND_I32, 4},
      {v1::PARAM_KIND_U32, 4},    {v1::PARAM_KIND_I64, 8},
      {v1::PARAM_KIND_U64, 8},    {v1::PARAM_KIND_F32, 4},
      {v1::PARAM_KIND_F64, 8},    {v1::PARAM_KIND_UNSPECIFIED, 0},
  };
  for (const auto& [kind, size] : sizes) {
    v1::ParamManifest param;
    param.set_kind(kind);
    EXPECT_EQ(ParamSize(param), size) << v1::ParamKind_Name(kind);
  }
  v1::ParamManifest bytes;
  bytes.set_kind(v1::PARAM_KIND_BYTES);
  bytes.set_size_bytes(12);
  EXPECT_EQ(ParamSize(bytes), 12u);
}

v1::KernelManifest FillU32() {
  v1::KernelManifest kernel;
  kernel.set_name("fill_u32");
  for (auto [name, kind] : std::vector<std::pair<const char*, v1::ParamKind>>{
           {"out", v1::PARAM_KIND_BUFFER},
           {"value", v1::PARAM_KIND_U32},
           {"n", v1::PARAM_KIND_U64}}) {
    v1::ParamManifest* param = kernel.add_params();
    param->set_name(name);
    param->set_kind(kind);
  }
  return kernel;
}

TEST(ModuleManifestTest, CheckKernelParamsAcceptsMatchingSizes) {
  EXPECT_TRUE(
      CheckKernelParams(FillU32(), {{0, 8}, {8, 4}, {16, 8}}, kOrigin).ok());
}

TEST(ModuleManifestTest, CheckKernelParamsRejectsACountMismatch) {
  const absl::Status status =
      CheckKernelParams(FillU32(), {{0, 8}, {8, 4}}, kOrigin);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            absl::StrCat(kOrigin,
                         ": kernel fill_u32 declares 3 params, the binary "
                         "has 2"));
}

TEST(ModuleManifestTest, CheckKernelParamsRejectsASizeMismatch) {
  const absl::Status status =
      CheckKernelParams(FillU32(), {{0, 8}, {8, 8}, {16, 8}}, kOrigin);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            absl::StrCat(kOrigin,
                         ": kernel fill_u32 param 1 (value) is U32 (4 bytes) "
                         "in the manifest but 8 bytes in the binary"));
}

// An AMD code object says which params are global buffers: a manifest
// that calls a pointer-sized value a BUFFER (or the reverse) is refused,
// which sizes alone cannot catch.
TEST(ModuleManifestTest, CheckKernelParamsComparesKindsWhereTheBinaryHasThem) {
  using Kind = BinaryParam::Kind;
  EXPECT_TRUE(
      CheckKernelParams(
          FillU32(),
          {{0, 8, Kind::kBuffer}, {8, 4, Kind::kValue}, {16, 8, Kind::kValue}},
          kOrigin)
          .ok());
  const absl::Status value_as_buffer = CheckKernelParams(
      FillU32(),
      {{0, 8, Kind::kValue}, {8, 4, Kind::kValue}, {16, 8, Kind::kValue}},
      kOrigin);
  EXPECT_EQ(value_as_buffer.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(value_as_buffer.message(),
            absl::StrCat(kOrigin,
                         ": kernel fill_u32 param 0 (out) is BUFFER in the "
                         "manifest but a value in the binary"));
  const absl::Status buffer_as_value = CheckKernelParams(
      FillU32(),
      {{0, 8, Kind::kBuffer}, {8, 4, Kind::kValue}, {16, 8, Kind::kBuffer}},
      kOrigin);
  EXPECT_EQ(buffer_as_value.message(),
            absl::StrCat(kOrigin,
                         ": kernel fill_u32 param 2 (n) is U64 in the "
                         "manifest but a global buffer in the binary"));
}

TEST(ModuleManifestTest, CheckKernelParamsComparesBytesSizes) {
  v1::KernelManifest kernel;
  kernel.set_name("k");
  v1::ParamManifest* param = kernel.add_params();
  param->set_kind(v1::PARAM_KIND_BYTES);
  param->set_size_bytes(16);
  EXPECT_TRUE(CheckKernelParams(kernel, {{0, 16}}, kOrigin).ok());
  const absl::Status status = CheckKernelParams(kernel, {{0, 12}}, kOrigin);
  EXPECT_EQ(status.message(),
            absl::StrCat(kOrigin,
                         ": kernel k param 0 is BYTES (16 bytes) in the "
                         "manifest but 12 bytes in the binary"));
}

TEST(ModuleManifestTest, ManifestPathForEachImageKind) {
  EXPECT_EQ(ManifestPathFor("/opt/m/samples.fatbin"),
            "/opt/m/samples.manifest.textproto");
  EXPECT_EQ(ManifestPathFor("/opt/m/samples.cubin"),
            "/opt/m/samples.manifest.textproto");
  EXPECT_EQ(ManifestPathFor("/opt/m/samples.ptx"),
            "/opt/m/samples.manifest.textproto");
  EXPECT_EQ(ManifestPathFor("rel/k.sm90.cubin"),
            "rel/k.sm90.manifest.textproto");
  EXPECT_EQ(ManifestPathFor("/opt/m.d/noext"),
            "/opt/m.d/noext.manifest.textproto");
}

TEST(ModuleManifestTest, ImageStemIsTheDefaultName) {
  EXPECT_EQ(ImageStem("/opt/m/samples.fatbin"), "samples");
  EXPECT_EQ(ImageStem("samples.ptx"), "samples");
  EXPECT_EQ(ImageStem("/opt/m.d/k.sm90.cubin"), "k.sm90");
  EXPECT_EQ(ImageStem("/opt/m.d/noext"), "noext");
}

TEST(ModuleManifestTest, MissingFileIsNotFound) {
  const std::string path =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/none.manifest.textproto");
  auto manifest = ReadModuleManifest(path, "none");
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(manifest.status().message(), HasSubstr(path));
}

TEST(ModuleManifestTest, DirectoryIsNotAManifest) {
  const std::string path = std::getenv("TEST_TMPDIR");
  auto manifest = ReadModuleManifest(path, "none");
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(manifest.status().message(), HasSubstr(path));
}

TEST(ModuleManifestTest, FileErrorsNameThePath) {
  const std::string path =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/bad.manifest.textproto");
  std::ofstream(path) << "name: \"bad\"\nkernels { name: \"a\" }\n"
                      << "kernels { name: \"a\" }\n";
  auto manifest = ReadModuleManifest(path, "bad");
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manifest.status().message(),
            absl::StrCat(path, ": kernel a is declared twice"));
}

}  // namespace
}  // namespace gpustream::modules
