// Modules, functions and kernel launches of the fake CUDA driver. A module
// image is accepted if it has code the device can run (CodeFor) and names at
// least one kernel that has a CPU twin (fake_kernels.cc); the module then
// offers exactly the twins it names.
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

#include "tests/fake_cuda/fake_api.h"
#include "tests/fake_cuda/fake_context.h"
#include "tests/fake_cuda/fake_kernels.h"
#include "tests/fake_cuda/fake_registry.h"
#include "tests/fake_cuda/fake_stream.h"

namespace fakecuda {
namespace {

class Module {
 public:
  Module(std::shared_ptr<Context> ctx, std::vector<const Twin*> twins)
      : ctx_(std::move(ctx)), twins_(std::move(twins)) {}
  const Context* owner() const { return ctx_.get(); }  // for Registry
  const std::shared_ptr<Context>& ctx() const { return ctx_; }
  const std::vector<const Twin*>& twins() const { return twins_; }

  // The function handle of `name` in this module, registered by the first
  // cuModuleGetFunction; none after cuModuleUnload. Guarded by mu.
  std::mutex mu;
  std::unordered_map<std::string, uintptr_t> functions;
  bool unloaded = false;

 private:
  const std::shared_ptr<Context> ctx_;
  const std::vector<const Twin*> twins_;
};

// Dynamic shared memory per block: what a kernel gets without opting in,
// and the most it may opt in to (the device's
// CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).
constexpr int kDefaultDynamicShared = 49152;
constexpr int kMaxSharedOptin = 232448;

class Function {
 public:
  Function(std::shared_ptr<Context> ctx, const Twin* twin)
      : ctx_(std::move(ctx)), twin_(twin) {}
  const Context* owner() const { return ctx_.get(); }  // for Registry
  const Twin& twin() const { return *twin_; }
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: 48 KiB until the
  // client opts in to more (cuFuncSetAttribute), as on a GPU.
  int max_dynamic_shared() const { return max_dynamic_shared_.load(); }
  void set_max_dynamic_shared(int bytes) { max_dynamic_shared_.store(bytes); }

 private:
  const std::shared_ptr<Context> ctx_;
  const Twin* const twin_;
  std::atomic<int> max_dynamic_shared_{kDefaultDynamicShared};
};

Registry<Module>& Modules() {
  static Registry<Module>* modules = new Registry<Module>;
  return *modules;
}

Registry<Function>& Functions() {
  static Registry<Function>* functions = new Registry<Function>;
  return *functions;
}

template <class T>
T Read(const unsigned char* p, size_t offset) {
  T value;
  std::memcpy(&value, p + offset, sizeof(value));
  return value;
}

// Whether `p` starts with `magic` (nonzero bytes), reading no further than
// the first mismatch.
bool StartsWith(const unsigned char* p, std::initializer_list<int> magic) {
  for (int byte : magic) {
    if (*p++ != byte) return false;
  }
  return true;
}

constexpr uint64_t kMaxImageSize = uint64_t{1} << 30;

// The size of the image at `p`, which cuModuleLoadData gets without one:
// from the header of a fatbin (nvcc -fatbin) or a 64-bit ELF cubin;
// anything else is text (PTX, or a test's list of names) up to its NUL.
// 0 for an empty or implausible image. The magic numbers are compared a
// byte at a time, so a short text image is never read past its NUL.
uint64_t ImageSize(const unsigned char* p) {
  if (StartsWith(p, {0x50, 0xED, 0x55, 0xBA})) {  // fatbin: magic, version,
    const uint64_t size = uint64_t{Read<uint16_t>(p, 6)} +  // header size,
                          Read<uint64_t>(p, 8);             // payload size
    return size <= kMaxImageSize ? size : 0;
  }
  if (StartsWith(p, {0x7F, 'E', 'L', 'F', 2})) {  // 64-bit ELF
    const uint64_t phoff = Read<uint64_t>(p, 0x20);
    const uint64_t shoff = Read<uint64_t>(p, 0x28);
    const uint64_t phsize =
        uint64_t{Read<uint16_t>(p, 0x36)} * Read<uint16_t>(p, 0x38);
    const uint64_t shentsize = Read<uint16_t>(p, 0x3A);
    const uint64_t shnum = Read<uint16_t>(p, 0x3C);
    if (phoff > kMaxImageSize || shoff > kMaxImageSize) return 0;
    uint64_t size =
        std::max<uint64_t>({64, phoff + phsize, shoff + shentsize * shnum});
    for (uint64_t i = 0; i < shnum && shentsize >= 0x28; ++i) {
      const unsigned char* sh = p + shoff + i * shentsize;
      if (Read<uint32_t>(sh, 4) == 8) continue;  // SHT_NOBITS: no bytes
      const uint64_t offset = Read<uint64_t>(sh, 0x18);
      const uint64_t bytes = Read<uint64_t>(sh, 0x20);
      if (offset > kMaxImageSize || bytes > kMaxImageSize) return 0;
      size = std::max(size, offset + bytes);
    }
    return size <= kMaxImageSize ? size : 0;
  }
  return std::strlen(reinterpret_cast<const char*>(p));
}

// Whether SASS built for `arch` runs on a device of compute capability
// `cc` (both major * 10 + minor): same major, minor at most the device's
// (sm_80 code runs on 8.6, not on 9.0). PTX for `arch` runs wherever
// arch <= cc: the driver compiles it.
bool SassRuns(uint32_t arch, int cc) {
  return static_cast<int>(arch) / 10 == cc / 10 &&
         static_cast<int>(arch) % 10 <= cc % 10;
}

// Whether the image of `size` bytes at `p` has code for a device of compute
// capability `cc`, as the driver decides before it loads anything:
// CUDA_ERROR_NO_BINARY_FOR_GPU for a fatbin none of whose entries runs
// there or a cubin built for another architecture, CUDA_ERROR_INVALID_PTX
// for PTX whose `.target` is newer than the device. Other text (a test's
// list of kernel names) runs anywhere.
CUresult CodeFor(const unsigned char* p, uint64_t size, int cc) {
  if (size >= 16 && StartsWith(p, {0x50, 0xED, 0x55, 0xBA})) {
    // Entries follow the header: kind (1 PTX, 2 ELF) at 0, the entry's
    // header size at 4, its payload size at 8, the architecture at 28.
    const uint64_t end = std::min<uint64_t>(
        size, uint64_t{Read<uint16_t>(p, 6)} + Read<uint64_t>(p, 8));
    for (uint64_t at = Read<uint16_t>(p, 6); at + 32 <= end;) {
      const uint16_t kind = Read<uint16_t>(p, at);
      const uint64_t header = Read<uint32_t>(p, at + 4);
      const uint64_t payload = Read<uint64_t>(p, at + 8);
      const uint32_t arch = Read<uint32_t>(p, at + 28);
      if ((kind == 1 && static_cast<int>(arch) <= cc) ||
          (kind == 2 && SassRuns(arch, cc))) {
        return CUDA_SUCCESS;
      }
      if (header < 32 || header > kMaxImageSize || payload > kMaxImageSize) {
        break;
      }
      at += header + payload;
    }
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  if (size >= 64 && StartsWith(p, {0x7F, 'E', 'L', 'F', 2})) {
    // e_flags: the SM in bits 8..15 from ELF ABI version 8 (CUDA 12.x and
    // later), in bits 0..7 before.
    const uint32_t flags = Read<uint32_t>(p, 0x30);
    const uint32_t arch = p[8] >= 8 ? (flags >> 8) & 0xFF : flags & 0xFF;
    return SassRuns(arch, cc) ? CUDA_SUCCESS : CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  const std::string_view text(reinterpret_cast<const char*>(p), size);
  if (const size_t at = text.find(".target sm_");
      at != std::string_view::npos) {
    int arch = 0;
    for (size_t i = at + 11;
         i < text.size() && text[i] >= '0' && text[i] <= '9' && arch < 1000;
         ++i) {
      arch = arch * 10 + (text[i] - '0');
    }
    return arch <= cc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_PTX;
  }
  return CUDA_SUCCESS;
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

CUresult FindFunction(CUfunction handle, std::shared_ptr<Function>* f) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(Sticky::kFail, &ctx); r != CUDA_SUCCESS) {
    return r;
  }
  *f = Functions().Find(HandleValue(handle));
  return *f != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// The launch's parameter bytes, from kernelParams (one pointer per
// parameter) or from extra's CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE.
CUresult GatherArgs(const Twin& twin, void** params, void** extra,
                    unsigned char* args) {
  const size_t size = ArgsSize(twin);
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params != nullptr) {
    for (int i = 0; i < twin.param_count; ++i) {
      if (params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(args + twin.params[i].offset, params[i], twin.params[i].size);
    }
    return CUDA_SUCCESS;
  }
  if (extra == nullptr) {
    return twin.param_count == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  const void* buffer = nullptr;
  const size_t* buffer_size = nullptr;
  for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = extra[i + 1];
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      buffer_size = static_cast<const size_t*>(extra[i + 1]);
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (size == 0) return CUDA_SUCCESS;
  if (buffer == nullptr || buffer_size == nullptr || *buffer_size < size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memcpy(args, buffer, size);
  return CUDA_SUCCESS;
}

}  // namespace

void ReleaseModules(const Context* ctx) {
  Functions().RemoveOwnedBy(ctx);
  Modules().RemoveOwnedBy(ctx);
}

// CUDA_ERROR_INVALID_IMAGE for an empty image or one that names no kernel
// with a CPU twin.
CUresult Fake_cuModuleLoadData(CUmodule* module, const void* image) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(Sticky::kFail, &ctx); r != CUDA_SUCCESS) {
    return r;
  }
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* bytes = static_cast<const unsigned char*>(image);
  const uint64_t size = bytes[0] == 0 ? 0 : ImageSize(bytes);
  if (size == 0) return CUDA_ERROR_INVALID_IMAGE;
  if (CUresult r = CodeFor(bytes, size, GetConfig()->compute_capability);
      r != CUDA_SUCCESS) {
    return r;
  }
  return LoadTwinModule(reinterpret_cast<const char*>(bytes), size, module);
}

CUresult LoadTwinModule(const char* image, size_t size, CUmodule* module) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(Sticky::kFail, &ctx); r != CUDA_SUCCESS) {
    return r;
  }
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<const Twin*> twins = TwinsIn({image, size});
  if (twins.empty()) return CUDA_ERROR_INVALID_IMAGE;
  const uintptr_t handle =
      Modules().Add(std::make_shared<Module>(ctx, std::move(twins)));
  if (handle == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *module = ToHandle<CUmodule>(handle);
  return CUDA_SUCCESS;
}

// Unloads the module; its functions become invalid handles. Launches
// already enqueued still run.
CUresult Fake_cuModuleUnload(CUmodule handle) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(Sticky::kIgnore, &ctx); r != CUDA_SUCCESS) {
    return r;
  }
  std::shared_ptr<Module> module = Modules().Remove(HandleValue(handle));
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(module->mu);
  module->unloaded = true;
  for (const auto& [name, function] : module->functions) {
    Functions().Remove(function);
  }
  return CUDA_SUCCESS;
}

CUresult Fake_cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod,
                                  const char* name) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(Sticky::kFail, &ctx); r != CUDA_SUCCESS) {
    return r;
  }
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Module> module = Modules().Find(HandleValue(hmod));
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const Twin* twin = nullptr;
  for (const Twin* t : module->twins()) {
    if (std::strcmp(t->name, name) == 0) twin = t;
  }
  if (twin == nullptr) return CUDA_ERROR_NOT_FOUND;
  std::lock_guard<std::mutex> lock(module->mu);
  if (module->unloaded) return CUDA_ERROR_INVALID_HANDLE;
  uintptr_t& function = module->functions[name];
  if (function == 0) {
    function = Functions().Add(std::make_shared<Function>(module->ctx(), twin));
    if (function == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  *hfunc = ToHandle<CUfunction>(function);
  return CUDA_SUCCESS;
}

CUresult Fake_cuFuncGetParamInfo(CUfunction func, size_t paramIndex,
                                 size_t* paramOffset, size_t* paramSize) {
  std::shared_ptr<Function> f;
  if (CUresult r = FindFunction(func, &f); r != CUDA_SUCCESS) return r;
  const Twin& twin = f->twin();
  if (paramOffset == nullptr ||
      paramIndex >= static_cast<size_t>(twin.param_count)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *paramOffset = twin.params[paramIndex].offset;
  if (paramSize != nullptr) *paramSize = twin.params[paramIndex].size;
  return CUDA_SUCCESS;
}

CUresult Fake_cuFuncGetAttribute(int* pi, CUfunction_attribute attrib,
                                 CUfunction hfunc) {
  std::shared_ptr<Function> f;
  if (CUresult r = FindFunction(hfunc, &f); r != CUDA_SUCCESS) return r;
  if (pi == nullptr || attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = f->twin().max_threads_per_block;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *pi = f->max_dynamic_shared();
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *pi = 16;
      break;
    default:
      *pi = 0;
      break;
  }
  return CUDA_SUCCESS;
}

// Only MAX_DYNAMIC_SHARED_SIZE_BYTES, up to the device's opt-in maximum
// (the twins use no static shared memory); others are NOT_SUPPORTED here.
CUresult Fake_cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib,
                                 int value) {
  std::shared_ptr<Function> f;
  if (CUresult r = FindFunction(hfunc, &f); r != CUDA_SUCCESS) return r;
  if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (value < 0 || value > kMaxSharedOptin) return CUDA_ERROR_INVALID_VALUE;
  f->set_max_dynamic_shared(value);
  return CUDA_SUCCESS;
}

// Validates the launch at once (a bad configuration is an ordinary, not a
// sticky, error) and enqueues the twin. The function and the stream must
// belong to the calling thread's current context.
CUresult Fake_cuLaunchKernel(CUfunction f, unsigned int gridDimX,
                             unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream,
                             void** kernelParams, void** extra) {
  std::shared_ptr<Function> function;
  if (CUresult r = FindFunction(f, &function); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = FindStreamForWork(hStream, true, &stream);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (function->owner() != stream->owner()) return CUDA_ERROR_INVALID_HANDLE;
  const Twin& twin = function->twin();
  if (gridDimX == 0 || gridDimY == 0 || gridDimZ == 0 || blockDimX == 0 ||
      blockDimY == 0 || blockDimZ == 0 || gridDimX > 2147483647u ||
      gridDimY > 65535 || gridDimZ > 65535 || blockDimX > 1024 ||
      blockDimY > 1024 || blockDimZ > 64 ||
      sharedMemBytes > static_cast<unsigned>(function->max_dynamic_shared())) {
    // More dynamic shared memory than the function opted in to.
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t block = uint64_t{blockDimX} * blockDimY * blockDimZ;
  if (block > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (block > static_cast<uint64_t>(twin.max_threads_per_block)) {
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;  // beyond __launch_bounds__
  }
  std::array<unsigned char, kMaxArgsSize> args{};
  if (CUresult r = GatherArgs(twin, kernelParams, extra, args.data());
      r != CUDA_SUCCESS) {
    return r;
  }
  const uint64_t threads = uint64_t{gridDimX} * blockDimX;
  return EnqueueOp(*stream, [twin = &twin, args, threads](Stream& s) {
    return twin->run(s, args.data(), threads);
  });
}

}  // namespace fakecuda
