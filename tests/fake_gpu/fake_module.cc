// Modules, functions and kernel launches of the emulated GPU. A module image
// (checked for the device by the skin) is accepted if it names at least one
// kernel that has a CPU twin (fake_kernels.cc); the module then offers
// exactly the twins it names.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tests/fake_gpu/fake_context.h"
#include "tests/fake_gpu/fake_gpu.h"
#include "tests/fake_gpu/fake_graph.h"
#include "tests/fake_gpu/fake_kernels.h"
#include "tests/fake_gpu/fake_registry.h"
#include "tests/fake_gpu/fake_stream.h"

namespace fakegpu {
namespace {

class Module {
 public:
  Module(std::shared_ptr<Context> ctx, std::vector<const Twin*> twins)
      : ctx_(std::move(ctx)), twins_(std::move(twins)) {}
  const Context* owner() const { return ctx_.get(); }  // for Registry
  const std::shared_ptr<Context>& ctx() const { return ctx_; }
  const std::vector<const Twin*>& twins() const { return twins_; }

  // The function handle of `name` in this module, registered by the first
  // ModuleGetFunction; none after ModuleUnload. Guarded by mu.
  std::mutex mu;
  std::unordered_map<std::string, uintptr_t> functions;
  bool unloaded = false;

 private:
  const std::shared_ptr<Context> ctx_;
  const std::vector<const Twin*> twins_;
};

class Function {
 public:
  Function(std::shared_ptr<Context> ctx, const Twin* twin)
      : ctx_(std::move(ctx)), twin_(twin) {}
  const Context* owner() const { return ctx_.get(); }  // for Registry
  const Twin& twin() const { return *twin_; }
  // FunctionAttribute::kMaxDynamicSharedSizeBytes: 48 KiB until the
  // client opts in to more (FuncSetAttribute), as on a GPU.
  int max_dynamic_shared() const { return max_dynamic_shared_.load(); }
  void set_max_dynamic_shared(int bytes) { max_dynamic_shared_.store(bytes); }
  // FunctionAttribute::kNonPortableClusterSizeAllowed.
  bool non_portable_clusters() const { return non_portable_clusters_.load(); }
  void set_non_portable_clusters(bool on) { non_portable_clusters_.store(on); }
  // The most blocks per cluster a launch may have.
  int max_cluster_size() const {
    return non_portable_clusters() ? kDeviceLimits.max_cluster_size
                                   : kDeviceLimits.portable_cluster_size;
  }

 private:
  const std::shared_ptr<Context> ctx_;
  const Twin* const twin_;
  std::atomic<int> max_dynamic_shared_{kDeviceLimits.shared_per_block};
  std::atomic<bool> non_portable_clusters_{false};
};

// Blocks of `block_size` threads and `dynamic_shared` bytes that one SM
// holds at once: bounded by blocks, threads (whole warps) and shared
// memory per SM; 0 when a block cannot run at all.
int ResidentBlocksPerSm(const Function& f, uint64_t block_size,
                        uint64_t dynamic_shared) {
  if (block_size == 0 ||
      block_size > static_cast<uint64_t>(f.twin().max_threads_per_block) ||
      dynamic_shared > static_cast<uint64_t>(f.max_dynamic_shared())) {
    return 0;
  }
  const uint64_t warps_threads = (block_size + 31) / 32 * 32;
  uint64_t blocks = kDeviceLimits.max_blocks_per_sm;
  blocks = std::min<uint64_t>(blocks,
                              kDeviceLimits.max_threads_per_sm / warps_threads);
  blocks = std::min<uint64_t>(
      blocks, kDeviceLimits.shared_per_sm /
                  (dynamic_shared + kDeviceLimits.reserved_shared_per_block));
  return static_cast<int>(blocks);
}

Registry<Module>& Modules() {
  static Registry<Module>* modules = new Registry<Module>;
  return *modules;
}

Registry<Function>& Functions() {
  static Registry<Function>* functions = new Registry<Function>;
  return *functions;
}

bool Within(unsigned int dim, int limit) {
  return dim <= static_cast<unsigned int>(limit);
}

bool IsIdentifierByte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '$';
}

// The twins that `image` names as whole identifiers (in a fatbin, the ELF
// string tables hold each kernel name as a NUL-terminated string).
std::vector<const Twin*> TwinsIn(std::string_view image) {
  std::vector<const Twin*> found;
  for (const Twin& twin : Twins()) {
    const std::string_view name = twin.name;
    for (size_t at = image.find(name); at != std::string_view::npos;
         at = image.find(name, at + 1)) {
      const size_t end = at + name.size();
      if ((at == 0 || !IsIdentifierByte(image[at - 1])) &&
          (end == image.size() || !IsIdentifierByte(image[end]))) {
        found.push_back(&twin);
        break;
      }
    }
  }
  return found;
}

Result FindFunction(FunctionHandle handle, std::shared_ptr<Function>* f) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  *f = Functions().Find(HandleValue(handle));
  return *f != nullptr ? Result::kSuccess : Result::kInvalidHandle;
}

// The launch's parameter bytes, from kernelParams (one pointer per
// parameter) or from extra's kLaunchParamBufferPointer/SIZE.
Result GatherArgs(const Twin& twin, void** params, void** extra,
                  unsigned char* args) {
  const size_t size = ArgsSize(twin);
  if (params != nullptr && extra != nullptr) return Result::kInvalidValue;
  if (params != nullptr) {
    for (int i = 0; i < twin.param_count; ++i) {
      if (params[i] == nullptr) return Result::kInvalidValue;
      std::memcpy(args + twin.params[i].offset, params[i], twin.params[i].size);
    }
    return Result::kSuccess;
  }
  if (extra == nullptr) {
    return twin.param_count == 0 ? Result::kSuccess : Result::kInvalidValue;
  }
  const void* buffer = nullptr;
  const size_t* buffer_size = nullptr;
  for (size_t i = 0; extra[i] != kLaunchParamEnd; i += 2) {
    if (extra[i] == kLaunchParamBufferPointer) {
      buffer = extra[i + 1];
    } else if (extra[i] == kLaunchParamBufferSize) {
      buffer_size = static_cast<const size_t*>(extra[i + 1]);
    } else {
      return Result::kInvalidValue;
    }
  }
  if (size == 0) return Result::kSuccess;
  if (buffer == nullptr || buffer_size == nullptr || *buffer_size < size) {
    return Result::kInvalidValue;
  }
  std::memcpy(args, buffer, size);
  return Result::kSuccess;
}

}  // namespace

void ReleaseModules(const Context* ctx) {
  Functions().RemoveOwnedBy(ctx);
  Modules().RemoveOwnedBy(ctx);
}

Result ModuleLoadTwins(const char* image, size_t size, ModuleHandle* module) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (module == nullptr || image == nullptr) return Result::kInvalidValue;
  std::vector<const Twin*> twins = TwinsIn({image, size});
  if (twins.empty()) return Result::kInvalidImage;
  const uintptr_t handle =
      Modules().Add(std::make_shared<Module>(ctx, std::move(twins)));
  if (handle == 0) return Result::kContextIsDestroyed;
  *module = ToHandle<ModuleHandle>(handle);
  return Result::kSuccess;
}

// Unloads the module; its functions become invalid handles. Launches
// already enqueued still run.
Result ModuleUnload(ModuleHandle handle) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kIgnore, &ctx); r != Result::kSuccess) {
    return r;
  }
  // Unloading waits for the context's work that may use the module: like a
  // synchronize, it fails while the context captures (and breaks that).
  if (Result r = CheckNoCaptureIn(*ctx); r != Result::kSuccess) return r;
  std::shared_ptr<Module> module = Modules().Remove(HandleValue(handle));
  if (module == nullptr) return Result::kInvalidHandle;
  std::lock_guard<std::mutex> lock(module->mu);
  module->unloaded = true;
  for (const auto& [name, function] : module->functions) {
    Functions().Remove(function);
  }
  return Result::kSuccess;
}

Result ModuleGetFunction(FunctionHandle* hfunc, ModuleHandle hmod,
                         const char* name) {
  std::shared_ptr<Context> ctx;
  if (Result r = CurrentContext(Sticky::kFail, &ctx); r != Result::kSuccess) {
    return r;
  }
  if (hfunc == nullptr || name == nullptr) return Result::kInvalidValue;
  std::shared_ptr<Module> module = Modules().Find(HandleValue(hmod));
  if (module == nullptr) return Result::kInvalidHandle;
  const Twin* twin = nullptr;
  for (const Twin* t : module->twins()) {
    if (std::strcmp(t->name, name) == 0) twin = t;
  }
  if (twin == nullptr) return Result::kNotFound;
  std::lock_guard<std::mutex> lock(module->mu);
  if (module->unloaded) return Result::kInvalidHandle;
  uintptr_t& function = module->functions[name];
  if (function == 0) {
    function = Functions().Add(std::make_shared<Function>(module->ctx(), twin));
    if (function == 0) return Result::kContextIsDestroyed;
  }
  *hfunc = ToHandle<FunctionHandle>(function);
  return Result::kSuccess;
}

Result FuncGetParamInfo(FunctionHandle func, size_t paramIndex,
                        size_t* paramOffset, size_t* paramSize) {
  std::shared_ptr<Function> f;
  if (Result r = FindFunction(func, &f); r != Result::kSuccess) return r;
  const Twin& twin = f->twin();
  if (paramOffset == nullptr ||
      paramIndex >= static_cast<size_t>(twin.param_count)) {
    return Result::kInvalidValue;
  }
  *paramOffset = twin.params[paramIndex].offset;
  if (paramSize != nullptr) *paramSize = twin.params[paramIndex].size;
  return Result::kSuccess;
}

Result FuncGetAttribute(int* pi, FunctionAttribute attrib,
                        FunctionHandle hfunc) {
  std::shared_ptr<Function> f;
  if (Result r = FindFunction(hfunc, &f); r != Result::kSuccess) return r;
  if (pi == nullptr) {
    return Result::kInvalidValue;
  }
  switch (attrib) {
    case FunctionAttribute::kMaxThreadsPerBlock:
      *pi = f->twin().max_threads_per_block;
      break;
    case FunctionAttribute::kMaxDynamicSharedSizeBytes:
      *pi = f->max_dynamic_shared();
      break;
    case FunctionAttribute::kNumRegs:
      *pi = 16;
      break;
    case FunctionAttribute::kNonPortableClusterSizeAllowed:
      *pi = f->non_portable_clusters() ? 1 : 0;
      break;
    default:
      *pi = 0;
      break;
  }
  return Result::kSuccess;
}

// MAX_DYNAMIC_SHARED_SIZE_BYTES, up to the device's opt-in maximum (the
// twins use no static shared memory), and NON_PORTABLE_CLUSTER_SIZE_ALLOWED
// (0 or 1); others are NOT_SUPPORTED here.
Result FuncSetAttribute(FunctionHandle hfunc, FunctionAttribute attrib,
                        int value) {
  std::shared_ptr<Function> f;
  if (Result r = FindFunction(hfunc, &f); r != Result::kSuccess) return r;
  if (attrib == FunctionAttribute::kNonPortableClusterSizeAllowed) {
    if (value != 0 && value != 1) return Result::kInvalidValue;
    f->set_non_portable_clusters(value == 1);
    return Result::kSuccess;
  }
  if (attrib != FunctionAttribute::kMaxDynamicSharedSizeBytes) {
    return Result::kNotSupported;
  }
  if (value < 0 || value > kDeviceLimits.shared_per_block_optin)
    return Result::kInvalidValue;
  f->set_max_dynamic_shared(value);
  return Result::kSuccess;
}

Result OccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, FunctionHandle f,
                                                 int block_size,
                                                 size_t dynamic_shared) {
  std::shared_ptr<Function> function;
  if (Result r = FindFunction(f, &function); r != Result::kSuccess) return r;
  if (blocks == nullptr || block_size <= 0) return Result::kInvalidValue;
  *blocks = ResidentBlocksPerSm(*function, static_cast<uint64_t>(block_size),
                                dynamic_shared);
  return Result::kSuccess;
}

Result OccupancyMaxPotentialClusterSize(int* size, FunctionHandle f) {
  std::shared_ptr<Function> function;
  if (Result r = FindFunction(f, &function); r != Result::kSuccess) return r;
  if (size == nullptr) return Result::kInvalidValue;
  *size = function->max_cluster_size();
  return Result::kSuccess;
}

Result LaunchKernel(FunctionHandle f, unsigned int gridDimX,
                    unsigned int gridDimY, unsigned int gridDimZ,
                    unsigned int blockDimX, unsigned int blockDimY,
                    unsigned int blockDimZ, unsigned int sharedMemBytes,
                    StreamHandle hStream, void** kernelParams, void** extra) {
  return LaunchKernelEx(f,
                        {{gridDimX, gridDimY, gridDimZ},
                         {blockDimX, blockDimY, blockDimZ},
                         sharedMemBytes,
                         {0, 0, 0},
                         false},
                        hStream, kernelParams, extra);
}

// Validates the launch at once (a bad configuration is an ordinary, not a
// sticky, error) and enqueues the twin. The function and the stream must
// belong to the calling thread's current context. A cluster must divide
// the grid and fit the function's cluster size; a cooperative grid must
// fit what the stream's SMs hold resident (COOPERATIVE_LAUNCH_TOO_LARGE),
// as cuLaunchKernelEx documents.
Result LaunchKernelEx(FunctionHandle f, const LaunchShape& shape,
                      StreamHandle hStream, void** kernelParams, void** extra) {
  std::shared_ptr<Function> function;
  if (Result r = FindFunction(f, &function); r != Result::kSuccess) return r;
  std::shared_ptr<Stream> stream;
  if (Result r = FindStreamForWork(hStream, true, &stream);
      r != Result::kSuccess) {
    return r;
  }
  if (function->owner() != stream->owner()) return Result::kInvalidHandle;
  const Twin& twin = function->twin();
  for (int d = 0; d < 3; ++d) {
    if (shape.grid[d] == 0 || shape.block[d] == 0 ||
        !Within(shape.grid[d], kDeviceLimits.max_grid_dim[d]) ||
        !Within(shape.block[d], kDeviceLimits.max_block_dim[d])) {
      return Result::kInvalidValue;
    }
  }
  // More dynamic shared memory than the function opted in to.
  if (shape.shared_bytes >
      static_cast<unsigned>(function->max_dynamic_shared())) {
    return Result::kInvalidValue;
  }
  const uint64_t block =
      uint64_t{shape.block[0]} * shape.block[1] * shape.block[2];
  if (block > static_cast<uint64_t>(kDeviceLimits.max_threads_per_block))
    return Result::kInvalidValue;
  if (block > static_cast<uint64_t>(twin.max_threads_per_block)) {
    return Result::kLaunchOutOfResources;  // beyond __launch_bounds__
  }
  TwinLaunch launch;
  launch.blocks = uint64_t{shape.grid[0]} * shape.grid[1] * shape.grid[2];
  launch.threads = uint64_t{shape.grid[0]} * shape.block[0];
  for (int d = 0; d < 3; ++d) launch.grid[d] = shape.grid[d];
  const bool clustered =
      shape.cluster[0] != 0 || shape.cluster[1] != 0 || shape.cluster[2] != 0;
  if (clustered) {
    uint64_t volume = 1;
    for (int d = 0; d < 3; ++d) {
      if (shape.cluster[d] == 0 || shape.grid[d] % shape.cluster[d] != 0) {
        return Result::kInvalidClusterSize;
      }
      volume *= shape.cluster[d];
      launch.cluster[d] = shape.cluster[d];
    }
    if (volume > static_cast<uint64_t>(function->max_cluster_size())) {
      return Result::kInvalidClusterSize;
    }
  }
  if (shape.cooperative) {
    const uint64_t resident =
        uint64_t(ResidentBlocksPerSm(*function, block, shape.shared_bytes)) *
        stream->sms();
    if (launch.blocks > resident) return Result::kCooperativeLaunchTooLarge;
    launch.cooperative = true;
  }
  std::array<unsigned char, kMaxArgsSize> args{};
  if (Result r = GatherArgs(twin, kernelParams, extra, args.data());
      r != Result::kSuccess) {
    return r;
  }
  return EnqueueCapturable(*stream, [twin = &twin, args, launch](Stream& s) {
    return twin->run(s, args.data(), launch);
  });
}

}  // namespace fakegpu
