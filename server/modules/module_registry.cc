// Module registry: loading and lookup.
#include "server/modules/module_registry.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpustream::modules {

absl::StatusOr<std::unique_ptr<ModuleRegistry>> ModuleRegistry::Create(
    backend::Device& device, const std::vector<std::string>& folders) {
  auto registry = std::unique_ptr<ModuleRegistry>(new ModuleRegistry());
  for (auto& module : device.BuiltinModules()) {
    if (auto s = registry->Add(std::move(module), "built-in"); !s.ok()) {
      return s;
    }
  }
  for (const std::string& folder : folders) {
    std::error_code error;
    std::vector<std::string> files;
    for (const auto& entry :
         std::filesystem::directory_iterator(folder, error)) {
      if (entry.is_regular_file() && device.IsModuleFile(entry.path())) {
        files.push_back(entry.path());
      }
    }
    if (error) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--modules folder ", folder, " cannot be read: ", error.message()));
    }
    std::sort(files.begin(), files.end());  // Deterministic load order.
    for (const std::string& path : files) {
      // A bad module file is refused alone: the daemon serves the others.
      auto module = device.LoadModule(path);
      if (!module.ok()) {
        registry->refused_.push_back(module.status());
        continue;
      }
      if (auto s = registry->Add(*std::move(module), path); !s.ok()) {
        registry->refused_.push_back(s);
      }
    }
  }
  return registry;
}

absl::Status ModuleRegistry::Add(std::unique_ptr<backend::Module> module,
                                 absl::string_view origin) {
  const std::string name = module->info().name;
  if (!modules_.emplace(name, std::move(module)).second) {
    return absl::AlreadyExistsError(absl::StrCat(origin, ": a module named '",
                                                 name, "' is already loaded"));
  }
  return absl::OkStatus();
}

std::vector<const backend::ModuleInfo*> ModuleRegistry::List() const {
  std::vector<const backend::ModuleInfo*> out;
  for (const auto& [name, module] : modules_) out.push_back(&module->info());
  std::sort(out.begin(), out.end(),
            [](auto* a, auto* b) { return a->name < b->name; });
  return out;
}

absl::StatusOr<const backend::Kernel*> ModuleRegistry::Find(
    absl::string_view module, absl::string_view kernel) const {
  if (module.empty()) return absl::InvalidArgumentError("module is empty");
  if (kernel.empty()) return absl::InvalidArgumentError("kernel is empty");
  auto it = modules_.find(module);
  if (it == modules_.end()) {
    return absl::NotFoundError(absl::StrCat("module '", module, "' not found"));
  }
  return it->second->FindKernel(kernel);
}

}  // namespace gpustream::modules
