// The HIP runtime, resolved at run time: dlopen of libamdhip64 (or the
// --hip_runtime path) and every entry point by dlsym (HIP 5.x has no
// hipGetProcAddress).
#ifndef GPUSTREAM_SERVER_BACKEND_HIP_HIP_DRIVER_H_
#define GPUSTREAM_SERVER_BACKEND_HIP_HIP_DRIVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/backend/hip/hip_api.h"

namespace gpustream::backend {

// The entry points the backend uses (hipapi::GPUSTREAM_HIP_ENTRY_POINTS).
// Immutable after Load; the library stays loaded for the process's lifetime
// (runtime threads may still run its code at exit).
struct HipDriver {
#define GPUSTREAM_HIP_DECLARE(name, ret, params) ret(*name) params = nullptr;
  using Error = hipapi::Error;
  using Device = hipapi::Device;
  using DeviceAttribute = hipapi::DeviceAttribute;
  using DeviceProp = hipapi::DeviceProp;
  using Context = hipapi::Context;
  using Stream = hipapi::Stream;
  using Event = hipapi::Event;
  using Module = hipapi::Module;
  using Function = hipapi::Function;
  using FunctionAttribute = hipapi::FunctionAttribute;
  using Graph = hipapi::Graph;
  using GraphNode = hipapi::GraphNode;
  using GraphExec = hipapi::GraphExec;
  using StreamCaptureMode = hipapi::StreamCaptureMode;
  GPUSTREAM_HIP_ENTRY_POINTS(GPUSTREAM_HIP_DECLARE)
#undef GPUSTREAM_HIP_DECLARE

  // The default runtime libraries, tried in order: ROCm 6, then ROCm 5.
  static std::vector<std::string> DefaultPaths();

  // Loads `path` (a file name, searched as dlopen does, or a path) and
  // resolves every entry point. UNAVAILABLE naming the library when it does
  // not load; UNIMPLEMENTED naming the entry point a runtime lacks
  // (hipapi::IsOptional ones may be null). Does not call hipInit.
  static absl::StatusOr<std::unique_ptr<HipDriver>> Load(
      const std::string& path);

  std::string path;
  int version = 0;  // hipRuntimeGetVersion: 50221153 is HIP 5.2.
};

}  // namespace gpustream::backend

#endif  // GPUSTREAM_SERVER_BACKEND_HIP_HIP_DRIVER_H_
