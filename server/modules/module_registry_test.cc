// Tests of module loading and kernel lookup.
#include "server/modules/module_registry.h"

#include <cstdlib>
#include <filesystem>

#include "gtest/gtest.h"
#include "server/backend/cpu/cpu_device.h"

namespace gpustream::modules {
namespace {

TEST(ModuleRegistryTest, BuiltinSamplesAreFound) {
  backend::CpuDevice device({});
  auto registry = ModuleRegistry::Create(device, {});
  ASSERT_TRUE(registry.ok()) << registry.status();
  ASSERT_EQ((*registry)->List().size(), 1u);
  EXPECT_EQ((*registry)->List()[0]->name, "samples");
  auto kernel = (*registry)->Find("samples", "vector_add_f32");
  ASSERT_TRUE(kernel.ok());
  EXPECT_EQ((*kernel)->signature().params.size(), 4u);
}

TEST(ModuleRegistryTest, LookupErrorsNameTheCulprit) {
  backend::CpuDevice device({});
  auto registry = *ModuleRegistry::Create(device, {});
  auto empty = registry->Find("", "noop");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  auto module = registry->Find("nosuch", "noop");
  EXPECT_EQ(module.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(module.status().message().find("nosuch"), std::string::npos);
  auto kernel = registry->Find("samples", "nosuch");
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(kernel.status().message().find("nosuch"), std::string::npos);
}

TEST(ModuleRegistryTest, FolderModuleWithTakenNameIsRefusedAlone) {
  const std::string dir =
      std::string(std::getenv("TEST_SRCDIR")) + "/gpustream/kernels/cpu";
  backend::CpuDevice device({});
  auto registry = ModuleRegistry::Create(device, {dir});
  ASSERT_TRUE(registry.ok()) << registry.status();
  ASSERT_EQ((*registry)->refused().size(), 1u);
  const absl::Status& refused = (*registry)->refused()[0];
  EXPECT_EQ(refused.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(refused.message().find("libgpustream_samples.so"),
            std::string::npos);
  // The built-in samples module is still served.
  EXPECT_TRUE((*registry)->Find("samples", "noop").ok());
}

TEST(ModuleRegistryTest, MissingFolderIsAnError) {
  backend::CpuDevice device({});
  auto registry = ModuleRegistry::Create(device, {"/nonexistent/modules"});
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpustream::modules
