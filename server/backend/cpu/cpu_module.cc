// Loading and running CPU kernel modules.
#include "server/backend/cpu/cpu_module.h"

#include <dlfcn.h>

#include <cstring>
#include <system_error>
#include <thread>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/cpu/cpu_buffer.h"

namespace gpustream::backend {
namespace {

GsArg ToGsArg(const KernelArg& arg) {
  GsArg out{};
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, BufferArg>) {
          out.kind = GS_PARAM_BUFFER;
          auto& buffer = static_cast<CpuBuffer&>(*v.buffer);
          out.value.span = {buffer.data() + v.offset, buffer.size() - v.offset};
        } else if constexpr (std::is_same_v<T, int32_t>) {
          out.kind = GS_PARAM_I32;
          out.value.i32 = v;
        } else if constexpr (std::is_same_v<T, uint32_t>) {
          out.kind = GS_PARAM_U32;
          out.value.u32 = v;
        } else if constexpr (std::is_same_v<T, int64_t>) {
          out.kind = GS_PARAM_I64;
          out.value.i64 = v;
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          out.kind = GS_PARAM_U64;
          out.value.u64 = v;
        } else if constexpr (std::is_same_v<T, float>) {
          out.kind = GS_PARAM_F32;
          out.value.f32 = v;
        } else if constexpr (std::is_same_v<T, double>) {
          out.kind = GS_PARAM_F64;
          out.value.f64 = v;
        } else {
          static_assert(std::is_same_v<T, std::string>);
          out.kind = GS_PARAM_BYTES;
          // Kernels only read BYTES (the ABI's span type is shared with
          // BUFFER); a captured graph passes the same bytes to every replay.
          out.value.span = {const_cast<char*>(v.data()), v.size()};
        }
      },
      arg);
  return out;
}

bool IsCount(ParamKind kind) {
  return kind == ParamKind::kI32 || kind == ParamKind::kU32 ||
         kind == ParamKind::kI64 || kind == ParamKind::kU64;
}

// The extents `kdef` declares (`extents`: its num_params entries, or null),
// into sig.extents (sig.params parsed).
absl::Status ReadExtents(const GsKernelDef& kdef, const GsExtent* extents,
                         const std::string& origin, KernelSignature& sig) {
  if (extents == nullptr) return absl::OkStatus();
  sig.extents.resize(kdef.num_params);
  for (uint32_t p = 0; p < kdef.num_params; ++p) {
    const GsExtent& e = extents[p];
    if (e.declared == 0) continue;
    const auto where = [&] {
      return absl::StrCat(origin, ": kernel ", kdef.name, " param ", p);
    };
    if (sig.params[p] != ParamKind::kBuffer) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), " is ", ParamKindName(sig.params[p]),
          " but declares an extent, which only BUFFER params take"));
    }
    if (e.count_param < -1 ||
        e.count_param >= static_cast<int64_t>(kdef.num_params)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "'s extent counts param ", e.count_param,
                       ", which the kernel does not have"));
    }
    if ((e.count_param < 0) != (e.bytes_per_element == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "'s extent sets ",
          e.count_param < 0 ? "bytes_per_element without count_param"
                            : "count_param without bytes_per_element",
          ": each needs the other"));
    }
    if (e.count_param >= 0 && !IsCount(sig.params[e.count_param])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "'s extent counts param ", e.count_param,
                       ", a ", ParamKindName(sig.params[e.count_param]),
                       ": a count must be I32, U32, I64 or U64"));
    }
    sig.extents[p] = BufferExtent{.bytes = e.bytes,
                                  .bytes_per_element = e.bytes_per_element,
                                  .count_param = e.count_param,
                                  .bytes_per_thread = e.bytes_per_thread};
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Outside a cooperative launch there is no grid to synchronize: fail at
// once, as grid.sync() traps on a GPU.
int NoGridSync(const GsLaunch*) { return 1; }

// The barrier of one cooperative launch: every block's call arrives, the
// last one releases the rest. A waiter polls the launch's stop word, so a
// stopped launch never leaves blocks waiting for one that returned.
class GridBarrier {
 public:
  explicit GridBarrier(uint64_t blocks) : blocks_(blocks) {}

  static int Sync(const GsLaunch* launch) {
    auto* barrier = static_cast<GridBarrier*>(launch->daemon);
    return barrier->Arrive(launch->stop_requested) ? 0 : 1;
  }

  // A block failed (or could not start): every block waiting now or later
  // gets nonzero, as a fault ends a whole grid on a GPU.
  void Break() {
    absl::MutexLock lock(&mu_);
    broken_ = true;
  }

 private:
  bool Arrive(const volatile int* stop) {
    absl::MutexLock lock(&mu_);
    const uint64_t generation = generation_;
    if (broken_) return false;
    if (++arrived_ == blocks_) {
      arrived_ = 0;
      ++generation_;
      return true;
    }
    auto released = [this, generation]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return generation_ != generation || broken_;
    };
    while (!released()) {
      if (__atomic_load_n(stop, __ATOMIC_ACQUIRE) != 0) return false;
      // The stop word has no wake-up of its own: polled each 10 ms.
      mu_.AwaitWithTimeout(absl::Condition(&released), absl::Milliseconds(10));
    }
    return generation_ != generation;
  }

  const uint64_t blocks_;
  absl::Mutex mu_;
  uint64_t arrived_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

absl::Status CpuKernel::Run(const LaunchConfig& config,
                            const std::vector<KernelArg>& args,
                            const volatile int* stop_requested) const {
  GsArg gs_args[16];
  std::vector<GsArg> many;
  GsArg* arg_ptr = gs_args;
  if (args.size() > std::size(gs_args)) {
    many.resize(args.size());
    arg_ptr = many.data();
  }
  for (size_t i = 0; i < args.size(); ++i) arg_ptr[i] = ToGsArg(args[i]);
  const Dim3 cluster = config.clustered ? config.cluster : Dim3{};
  const uint64_t blocks = config.grid.Volume();
  GsLaunch launch = {
      .grid = {config.grid.x, config.grid.y, config.grid.z},
      .block = {config.block.x, config.block.y, config.block.z},
      .args = arg_ptr,
      .num_args = static_cast<uint32_t>(args.size()),
      .error = nullptr,
      .error_size = 0,
      .stop_requested = stop_requested,
      .first_block = 0,
      .block_count = blocks,
      .cluster = {cluster.x, cluster.y, cluster.z},
      .cooperative = config.cooperative ? 1u : 0u,
      .grid_sync = &NoGridSync,
      .daemon = nullptr,
  };
  // Kernels of ABI 1 to 3 run the whole grid in one call, cooperative or
  // not (they know no grid barrier).
  if (!config.cooperative || abi_version_ < 4) {
    char error[256] = {0};
    launch.error = error;
    launch.error_size = sizeof(error);
    return Finish(fn_(&launch), error);
  }
  // Cooperative: one call per block, all at once, the first on this thread
  // (the queue's execution thread, whose stop word they share).
  GridBarrier barrier(blocks);
  launch.grid_sync = &GridBarrier::Sync;
  launch.daemon = &barrier;
  struct Block {
    GsLaunch launch;
    char error[256] = {0};
    int result = 0;
  };
  std::vector<Block> calls(blocks);
  for (uint64_t b = 0; b < blocks; ++b) {
    calls[b].launch = launch;
    calls[b].launch.first_block = b;
    calls[b].launch.block_count = 1;
    calls[b].launch.error = calls[b].error;
    calls[b].launch.error_size = sizeof(calls[b].error);
  }
  auto run = [this, &barrier](Block* call) {
    call->result = fn_(&call->launch);
    if (call->result != 0) barrier.Break();
  };
  std::vector<std::thread> threads;
  threads.reserve(blocks - 1);
  absl::Status started;
  for (uint64_t b = 1; b < blocks; ++b) {
    try {
      threads.emplace_back(run, &calls[b]);
    } catch (const std::system_error& e) {
      // Out of threads: the blocks already started must not wait for the
      // rest.
      barrier.Break();
      started = absl::ResourceExhaustedError(absl::StrCat(
          "cooperative launch of ", signature_.name, ": no thread for block ",
          b, " of ", blocks, " (", e.what(), ")"));
      break;
    }
  }
  if (started.ok()) run(&calls[0]);
  for (std::thread& t : threads) t.join();
  if (!started.ok()) return started;
  // The block that says why (the others may only have been released).
  for (Block& call : calls) {
    if (call.result != 0 && call.error[0] != '\0') {
      return Finish(call.result, call.error);
    }
  }
  for (Block& call : calls) {
    if (call.result != 0) return Finish(call.result, call.error);
  }
  return absl::OkStatus();
}

absl::Status CpuKernel::Finish(int result, char* error) const {
  if (result == 0) return absl::OkStatus();
  error[255] = '\0';
  return absl::InternalError(
      absl::StrCat("kernel fault in ", signature_.name, ": ", error));
}

absl::StatusOr<std::unique_ptr<CpuModule>> CpuModule::Create(
    const GsModuleDef* def, const std::string& origin) {
  if (def == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": module entry point returned null"));
  }
  // ABI 2 only appended GsLaunch::stop_requested, which ABI 1 kernels never
  // read: they run unchanged (and cannot be stopped early). ABI 3 appended
  // GsModuleDef::extents, read only from ABI 3 modules: older modules'
  // kernels load unchecked. ABI 4 appended GsLaunch's block range, cluster
  // and cooperative fields: older kernels never read them, and get the
  // whole grid in one call (Run).
  if (def->abi_version < GS_CPU_MODULE_MIN_ABI_VERSION ||
      def->abi_version > GS_CPU_MODULE_ABI_VERSION) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": module ABI version ", def->abi_version,
                     ", this daemon supports ", GS_CPU_MODULE_MIN_ABI_VERSION,
                     " to ", GS_CPU_MODULE_ABI_VERSION));
  }
  if (def->name == nullptr || def->name[0] == '\0') {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": module has an empty name"));
  }
  auto module = std::unique_ptr<CpuModule>(new CpuModule());
  module->info_.name = def->name;
  for (uint32_t k = 0; k < def->num_kernels; ++k) {
    const GsKernelDef& kdef = def->kernels[k];
    if (kdef.name == nullptr || kdef.name[0] == '\0' || kdef.fn == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": kernel #", k, " lacks a name or an entry point"));
    }
    KernelSignature sig;
    sig.name = kdef.name;
    // CPU kernels run any block the device accepts (CpuDevice's limits);
    // arguments travel unpacked, so only sizes are known.
    sig.limits = {.max_threads_per_block = kCpuMaxThreadsPerBlock,
                  .static_shared_memory_bytes = 0,
                  .max_dynamic_shared_memory_bytes = kCpuMaxSharedMemoryBytes};
    for (uint32_t p = 0; p < kdef.num_params; ++p) {
      // Read as the int a C module stores: through the C++ enum type a
      // value the enum lacks (what this check rejects) would be undefined.
      static_assert(sizeof(GsParamKind) == sizeof(int));
      int kind;
      std::memcpy(&kind, &kdef.params[p], sizeof(kind));
      if (kind < GS_PARAM_BUFFER || kind > GS_PARAM_BYTES) {
        return absl::InvalidArgumentError(
            absl::StrCat(origin, ": kernel ", kdef.name, " param ", p,
                         " has unknown kind ", kind));
      }
      sig.params.push_back(static_cast<ParamKind>(kind));
      sig.layout.push_back({ParamKindSize(sig.params.back()), 0});
    }
    const GsExtent* extents = def->abi_version >= 3 && def->extents != nullptr
                                  ? def->extents[k]
                                  : nullptr;
    if (absl::Status s = ReadExtents(kdef, extents, origin, sig); !s.ok()) {
      return s;
    }
    module->info_.kernels.push_back(sig);
    std::string name = sig.name;
    if (!module->kernels_
             .emplace(std::move(name),
                      std::make_unique<CpuKernel>(std::move(sig), kdef.fn,
                                                  def->abi_version))
             .second) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": kernel ", kdef.name, " is declared twice"));
    }
  }
  return module;
}

absl::StatusOr<const Kernel*> CpuModule::FindKernel(
    absl::string_view name) const {
  auto it = kernels_.find(name);
  if (it == kernels_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "kernel '", name, "' not found in module '", info_.name, "'"));
  }
  return it->second.get();
}

absl::StatusOr<std::unique_ptr<CpuModule>> LoadCpuModule(
    const std::string& path) {
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load module ", path, ": ", dlerror()));
  }
  auto entry = reinterpret_cast<GsModuleEntryFn>(
      dlsym(library, GS_CPU_MODULE_ENTRY_POINT));
  if (entry == nullptr) {
    dlclose(library);
    return absl::InvalidArgumentError(absl::StrCat(
        path, " does not export ", GS_CPU_MODULE_ENTRY_POINT, "()"));
  }
  auto module = CpuModule::Create(entry(), path);
  if (!module.ok()) dlclose(library);
  return module;
}

}  // namespace gpustream::backend
