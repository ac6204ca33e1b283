// Chooses and creates the devices the daemon serves (--backend).
#ifndef GPUSTREAM_SERVER_BACKEND_BACKEND_FACTORY_H_
#define GPUSTREAM_SERVER_BACKEND_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/backend/cpu/cpu_device.h"
#include "server/backend/device.h"

namespace gpustream::backend {

struct BackendOptions {
  std::string backend = "auto";  // auto | cpu | cuda | hip
  CpuDeviceOptions cpu;
};

// The devices of the chosen backend, ids in vector order. "auto" picks the
// first GPU backend whose driver loads, else the CPU. INVALID_ARGUMENT for an
// unknown name; UNIMPLEMENTED for a GPU backend this build does not have yet.
absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateDevices(
    const BackendOptions& options);

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_BACKEND_FACTORY_H_
