// A loaded kernel module and its kernels.
#ifndef GPUSTREAM_SERVER_BACKEND_MODULE_H_
#define GPUSTREAM_SERVER_BACKEND_MODULE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/backend/types.h"

namespace gpustream::backend {

// One launchable function of a module. Owned by its Module; valid while the
// module is loaded (modules stay loaded for the daemon's lifetime).
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual const KernelSignature& signature() const = 0;
};

class Module {
 public:
  virtual ~Module() = default;
  virtual const ModuleInfo& info() const = 0;
  // NOT_FOUND naming module and kernel if absent.
  virtual absl::StatusOr<const Kernel*> FindKernel(
      absl::string_view name) const = 0;
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_MODULE_H_
