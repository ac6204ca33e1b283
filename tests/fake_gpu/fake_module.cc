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

 private:
  const std::shared_ptr<Context> ctx_;
  const Twin* const twin_;
  std::atomic<int> max_dynamic_shared_{kDeviceLimits.shared_per_block};
};

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
    default:
      *pi = 0;
      break;
  }
  return Result::kSuccess;
}

// Only MAX_DYNAMIC_SHARED_SIZE_BYTES, up to the device's opt-in maximum
// (the twins use no static shared memory); others are NOT_SUPPORTED here.
Result FuncSetAttribute(FunctionHandle hfunc, FunctionAttribute attrib,
                        int value) {
  std::shared_ptr<Function> f;
  if (Result r = FindFunction(hfunc, &f); r != Result::kSuccess) return r;
  if (attrib != FunctionAttribute::kMaxDynamicSharedSizeBytes) {
    return Result::kNotSupported;
  }
  if (value < 0 || value > kDeviceLimits.shared_per_block_optin)
    return Result::kInvalidValue;
  f->set_max_dynamic_shared(value);
  return Result::kSuccess;
}

// Validates the launch at once (a bad configuration is an ordinary, not a
// sticky, error) and enqueues the twin. The function and the stream must
// belong to the calling thread's current context.
Result LaunchKernel(FunctionHandle f, unsigned int gridDimX,
                    unsigned int gridDimY, unsigned int gridDimZ,
                    unsigned int blockDimX, unsigned int blockDimY,
                    unsigned int blockDimZ, unsigned int sharedMemBytes,
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
  if (gridDimX == 0 || gridDimY == 0 || gridDimZ == 0 || blockDimX == 0 ||
      blockDimY == 0 || blockDimZ == 0 ||
      !Within(gridDimX, kDeviceLimits.max_grid_dim[0]) ||
      !Within(gridDimY, kDeviceLimits.max_grid_dim[1]) ||
      !Within(gridDimZ, kDeviceLimits.max_grid_dim[2]) ||
      !Within(blockDimX, kDeviceLimits.max_block_dim[0]) ||
      !Within(blockDimY, kDeviceLimits.max_block_dim[1]) ||
      !Within(blockDimZ, kDeviceLimits.max_block_dim[2]) ||
      sharedMemBytes > static_cast<unsigned>(function->max_dynamic_shared())) {
    // More dynamic shared memory than the function opted in to.
    return Result::kInvalidValue;
  }
  const uint64_t block = uint64_t{blockDimX} * blockDimY * blockDimZ;
  if (block > static_cast<uint64_t>(kDeviceLimits.max_threads_per_block))
    return Result::kInvalidValue;
  if (block > static_cast<uint64_t>(twin.max_threads_per_block)) {
    return Result::kLaunchOutOfResources;  // beyond __launch_bounds__
  }
  std::array<unsigned char, kMaxArgsSize> args{};
  if (Result r = GatherArgs(twin, kernelParams, extra, args.data());
      r != Result::kSuccess) {
    return r;
  }
  const uint64_t threads = uint64_t{gridDimX} * blockDimX;
  const uint64_t blocks = uint64_t{gridDimX} * gridDimY * gridDimZ;
  return EnqueueOp(*stream, [twin = &twin, args, threads, blocks](Stream& s) {
    return twin->run(s, args.data(), threads, blocks);
  });
}

}  // namespace fakegpu
