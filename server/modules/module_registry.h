// The kernel modules loaded for one device: built-ins plus --modules folders.
#ifndef GPUSTREAM_SERVER_MODULES_MODULE_REGISTRY_H_
#define GPUSTREAM_SERVER_MODULES_MODULE_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/backend/device.h"
#include "server/backend/module.h"

namespace gpustream::modules {

// Immutable after Create, hence thread-safe. Modules and kernels live as long
// as the registry (the daemon's lifetime).
class ModuleRegistry {
 public:
  // Loads `device`'s built-in modules and every module file of the device's
  // backend found (not recursively) in `folders`. An unreadable folder is an
  // error; a file that fails to load (or a module name loaded twice) is
  // refused alone, with a status naming the path (refused()).
  static absl::StatusOr<std::unique_ptr<ModuleRegistry>> Create(
      backend::Device& device, const std::vector<std::string>& folders);

  // Why each refused module file was refused.
  const std::vector<absl::Status>& refused() const { return refused_; }

  // Modules sorted by name.
  std::vector<const backend::ModuleInfo*> List() const;

  // INVALID_ARGUMENT for an empty module or kernel name; NOT_FOUND naming
  // the module or kernel otherwise.
  absl::StatusOr<const backend::Kernel*> Find(absl::string_view module,
                                              absl::string_view kernel) const;

 private:
  ModuleRegistry() = default;
  absl::Status Add(std::unique_ptr<backend::Module> module,
                   absl::string_view origin);

  absl::flat_hash_map<std::string, std::unique_ptr<backend::Module>> modules_;
  std::vector<absl::Status> refused_;
};

}  // namespace gpustream::modules

#endif  // GPUSTREAM_SERVER_MODULES_MODULE_REGISTRY_H_
