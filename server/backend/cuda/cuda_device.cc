// The CUDA device: context, properties, object factory, health.
#include "server/backend/cuda/cuda_device.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/backend/cuda/cuda_module.h"
#include "server/backend/cuda/cuda_queue.h"
#include "server/log/log.h"
#include "server/modules/module_manifest.h"

namespace gpustream::backend {
namespace {

// Dispatcher tick while host event waiters or admission waiters need
// polling (queues say what they need: CudaQueueCore::Tick).
constexpr absl::Duration kTickPeriod = absl::Microseconds(250);

// The context current on this thread, and the epoch it was made current in.
thread_local const void* current_device = nullptr;
thread_local CUcontext current_context = nullptr;
thread_local uint64_t current_epoch = 0;

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(
    std::shared_ptr<const CudaDriver> driver, int ordinal) {
  CUdevice dev = 0;
  if (absl::Status s = ToStatus(driver->cuDeviceGet(&dev, ordinal),
                                "cuDeviceGet", driver.get());
      !s.ok()) {
    return s;
  }
  auto device = std::unique_ptr<CudaDevice>(
      new CudaDevice(std::move(driver), ordinal, dev));
  CUcontext context = nullptr;
  if (absl::Status s =
          ToStatus(device->driver_->cuDevicePrimaryCtxRetain(&context, dev),
                   "cuDevicePrimaryCtxRetain", device->driver_.get());
      !s.ok()) {
    return s;
  }
  device->context_.store(context, std::memory_order_release);
  if (absl::Status s = device->ReadInfo(); !s.ok()) return s;
  device->cleanup_ = std::make_unique<util::SerialExecutor>();
  CudaDevice* raw = device.get();
  device->dispatcher_ = std::make_unique<GpuDispatcher>(
      [raw] { raw->MakeCurrent().IgnoreError(); },
      [raw] { return raw->Tick(); });
  return device;
}

CudaDevice::~CudaDevice() {
  // The dispatcher first, so that no tick holds queues out of the lists
  // below; from then on posts run on the poster's thread.
  dispatcher_->Shutdown();
  // Work that never completed (a stream stuck at shutdown) completes with
  // an error, so nothing it holds outlives the device; host event waits
  // end too.
  std::vector<std::shared_ptr<CudaQueueCore>> stuck;
  std::vector<EventWatch> watches;
  {
    absl::MutexLock lock(&mu_);
    for (auto& weak : tracked_) {
      if (auto core = weak.lock()) stuck.push_back(std::move(core));
    }
    for (auto& [raw, core] : retired_) stuck.push_back(core);
    tracked_.clear();
    watches.swap(event_watches_);
  }
  const absl::Status shutdown =
      absl::UnavailableError("the CUDA device is shutting down");
  for (auto& core : stuck) core->Fail(shutdown);
  stuck.clear();
  for (auto& w : watches) w.done();
  watches.clear();
  // Then the releases those posted, and no more cleanup thread.
  cleanup_->Shutdown();
  {
    absl::MutexLock lock(&mu_);
    retired_.clear();
  }
  if (!failed() && MakeCurrent().ok()) {
    absl::MutexLock lock(&memory_mu_);
    if (memory_stream_ != nullptr && memory_epoch_ == epoch()) {
      driver_->cuStreamSynchronize(memory_stream_);  // Its frees, done.
      driver_->cuStreamDestroy(memory_stream_);
    }
    events_.FreeAll();
    staging_.FreeAll();
    slots_.FreeAll();
  }
  driver_->cuDevicePrimaryCtxRelease(device_);
}

absl::Status CudaDevice::MakeCurrent() {
  const uint64_t epoch = this->epoch();
  const CUcontext context = context_.load(std::memory_order_acquire);
  if (current_device == this && current_context == context &&
      current_epoch == epoch) {
    return absl::OkStatus();
  }
  absl::Status s = ToStatus(driver_->cuCtxSetCurrent(context),
                            "cuCtxSetCurrent", driver_.get());
  if (s.ok()) {
    current_device = this;
    current_context = context;
    current_epoch = epoch;
  }
  return s;
}

absl::Status CudaDevice::ReadInfo() {
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  const CudaDriver& d = *driver_;
  char name[256] = {};
  d.cuDeviceGetName(name, sizeof(name) - 1, device_);
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    d.cuDeviceGetAttribute(&v, a, device_);
    return v;
  };
  info_.backend = "cuda";
  info_.name = name;
  info_.arch =
      absl::StrCat("sm_", attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                   attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  info_.multiprocessor_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  int least = 0, greatest = 0;
  d.cuCtxGetStreamPriorityRange(&least, &greatest);
  info_.priority_least = least;
  info_.priority_greatest = greatest;
  info_.supports_wait_value =
      attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) != 0;
  info_.supports_host_func = true;
  pools_ = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) != 0;
  info_.supports_timing = true;
  info_.max_grid = {
      static_cast<uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)),
      static_cast<uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)),
      static_cast<uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z))};
  info_.max_block = {
      static_cast<uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)),
      static_cast<uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)),
      static_cast<uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z))};
  info_.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  info_.max_shared_memory_bytes =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  if (info_.max_shared_memory_bytes == 0) {
    info_.max_shared_memory_bytes =
        attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  }
  return absl::OkStatus();
}

CudaDevice::Pass::Pass(CudaDevice& device, uint64_t epoch, Kind kind)
    : device_(device) {
  // Counted before the checks, all sequentially consistent. Recover sets
  // failed_ (long before) and resetting_, waits until no pass is counted,
  // moves the epoch on, then clears resetting_ (and at its end failed_).
  // So a pass Recover did not wait for sees the flag set, or, having seen
  // it cleared, the new epoch: the flag is read first.
  device_.passes_.fetch_add(1);
  granted_ =
      !(kind == kDriver ? device_.failed_.load() : device_.resetting_.load()) &&
      device_.epoch_.load() == epoch;
  if (!granted_) device_.passes_.fetch_sub(1);
}

CudaDevice::Pass::~Pass() {
  if (granted_) device_.passes_.fetch_sub(1);
}

absl::Status CudaDevice::PassRefused() {
  if (failed()) return failure();
  return absl::AbortedError(absl::StrCat(
      "CUDA device ", ordinal_,
      " was reset after a failure: objects of its previous context are gone"));
}

MemoryInfo CudaDevice::memory() {
  size_t free = 0, total = 0;
  if (Pass pass(*this); pass && MakeCurrent().ok()) {
    driver_->cuMemGetInfo(&free, &total);
  }
  if (total == 0) driver_->cuDeviceTotalMem(&total, device_);
  // NVIDIA GPUs map device memory in 2 MiB pages (pools grow by them too).
  constexpr uint64_t kDevicePage = uint64_t{2} << 20;
  return {total, free, kDevicePage};
}

void CudaDevice::SetFatalErrorHandler(FatalErrorHandler handler) {
  absl::MutexLock lock(&handler_mu_);
  on_fatal_ = std::move(handler);
}

void CudaDevice::RememberModule(CudaModule* module) {
  absl::MutexLock lock(&mu_);
  modules_.push_back(module);
}

void CudaDevice::ForgetModule(CudaModule* module) {
  absl::MutexLock lock(&mu_);
  std::erase(modules_, module);
}

void CudaDevice::HoldUntilIdle(std::shared_ptr<CudaQueueCore> core) {
  absl::MutexLock lock(&mu_);
  retired_.emplace(core.get(), std::move(core));
}

void CudaDevice::LetGo(CudaQueueCore* core) {
  std::shared_ptr<CudaQueueCore> held;
  {
    absl::MutexLock lock(&mu_);
    auto it = retired_.find(core);
    if (it == retired_.end()) return;
    held = std::move(it->second);
    retired_.erase(it);
  }
  cleanup_->Post([held = std::move(held)] {});
}

absl::Status CudaDevice::failure() {
  absl::MutexLock lock(&mu_);
  return failure_;
}

absl::Status CudaDevice::Check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) [[likely]] {
    return absl::OkStatus();
  }
  absl::Status status = CudaError(r, call, driver_.get());
  if (!IsFatal(r)) return status;
  // Whichever call notices a lost context, the caller hears that the device
  // failed and why, not that its own call did.
  Fail(status);
  return failure();
}

void CudaDevice::Warn(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  log::Warning("cuda_call_failed")
      .Num("device", ordinal_)
      .Status(Check(r, call));
}

void CudaDevice::Fail(absl::Status status) {
  std::vector<std::shared_ptr<CudaQueueCore>> queues;
  std::vector<EventWatch> watches;
  {
    absl::MutexLock lock(&mu_);
    if (failed_.exchange(true)) return;  // Reported once per failure.
    failure_ = absl::AbortedError(
        absl::StrCat("CUDA device ", ordinal_, " failed: ", status.message()));
    status = failure_;
    for (auto& weak : tracked_) {
      if (auto core = weak.lock()) queues.push_back(std::move(core));
    }
    tracked_.clear();
    watches.swap(event_watches_);
  }
  log::Error("cuda_device_failed").Num("device", ordinal_).Status(status);
  // On the dispatcher: the caller may hold a queue's lock (a failed launch).
  // A tick in progress (which may be the caller) finishes first, failing
  // the queues it held, so the handler hears of every queue.
  dispatcher_->Post([this, queues = std::move(queues),
                     watches = std::move(watches), status]() mutable {
    FailQueues(queues, status);
    for (auto& w : watches) w.done();
    DeviceFailure failure{status, {}};
    {
      absl::MutexLock lock(&mu_);
      failure.sessions_with_kernels.swap(failed_sessions_);
    }
    absl::MutexLock lock(&handler_mu_);
    if (on_fatal_) on_fatal_(failure);
  });
}

void CudaDevice::FailQueues(std::vector<std::shared_ptr<CudaQueueCore>>& queues,
                            const absl::Status& status) {
  std::vector<uint64_t> sessions;
  for (auto& core : queues) {
    if (core->Fail(status)) sessions.push_back(core->session_key());
  }
  absl::MutexLock lock(&mu_);
  for (uint64_t key : sessions) {
    if (absl::c_find(failed_sessions_, key) == failed_sessions_.end()) {
      failed_sessions_.push_back(key);
    }
  }
}

absl::Status CudaDevice::Recover() {
  if (!failed()) return absl::OkStatus();
  // Releases of the failed context's objects skip their driver calls (the
  // epoch moves on below); let those already posted run first.
  cleanup_->Drain();
  // No driver pass is granted while the device is failed, and no memory
  // pass from now on: wait out those granted before (issuing threads,
  // polls, stats, flag stores), which may still use this context's handles
  // or memory. They never wait for anything.
  resetting_.store(true);
  while (passes_.load() != 0) absl::SleepFor(absl::Microseconds(50));
  // From here no release, allocation or elapsed-time query uses a handle of
  // the context being reset.
  absl::WriterMutexLock reset_lock(&reset_mu_);
  epoch_.fetch_add(1);  // Sequentially consistent, before resetting_ clears.
  resetting_.store(false);  // The old epoch's passes are refused from here.
  // After the epoch moved: a pooled event or staging block of the old
  // context put back from now on is dropped (the pools check the epoch
  // under their lock), so none survives into the new one.
  events_.Forget();
  staging_.Forget();
  // After the epoch moved: a slot of the old context put back from now on is
  // dropped (CudaSlotAllocator::Put), so none survives into the new one,
  // whose reset frees the old slabs.
  slots_.Forget();
  if (absl::Status s = Check(driver_->cuDevicePrimaryCtxReset(device_),
                             "cuDevicePrimaryCtxReset");
      !s.ok()) {
    return s;
  }
  driver_->cuDevicePrimaryCtxRelease(device_);
  CUcontext context = nullptr;
  if (absl::Status s =
          Check(driver_->cuDevicePrimaryCtxRetain(&context, device_),
                "cuDevicePrimaryCtxRetain");
      !s.ok()) {
    return s;
  }
  context_.store(context, std::memory_order_release);
  current_context = nullptr;
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  // Prove the device before serving it again: a reset is not promised to
  // clear a sticky error (cuda.h: "the process must be terminated and
  // relaunched"), and a dead GPU must not be served as a live one. An
  // allocation, a memset and a stream synchronize reach the device.
  CUdeviceptr probe = 0;
  bool pooled = false;
  if (absl::Status s = AllocateDevice(4, &probe, &pooled); !s.ok()) {
    return absl::AbortedError(absl::StrCat(
        "CUDA device ", ordinal_,
        " still fails after a reset (only a new process can clear a "
        "process-fatal error): ",
        s.message()));
  }
  FreeDevice(probe, pooled);
  std::vector<CudaModule*> modules;
  {
    absl::MutexLock lock(&mu_);
    modules = modules_;
  }
  for (CudaModule* m : modules) {
    if (absl::Status s = m->Reload(); !s.ok()) return s;
  }
  // The dispatcher makes the new context current on its next call.
  dispatcher_->Post([this, epoch = epoch()] {
    if (Pass pass(*this, epoch); pass) MakeCurrent().IgnoreError();
  });
  // failure_ stays: a caller that saw failed() just before this still
  // reports why (it must never report an OK status as the failure).
  {
    absl::MutexLock lock(&mu_);
    failed_sessions_.clear();  // The next failure's are its own.
  }
  failed_.store(false, std::memory_order_release);
  return absl::OkStatus();
}

void CudaDevice::Release(uint64_t epoch, absl::AnyInvocable<void()> fn) {
  cleanup_->Post([this, epoch, fn = std::move(fn)]() mutable {
    absl::ReaderMutexLock lock(&reset_mu_);
    if (epoch != this->epoch() || !MakeCurrent().ok()) return;
    fn();
  });
}

void CudaDevice::Track(std::shared_ptr<CudaQueueCore> core) {
  {
    absl::MutexLock lock(&mu_);
    tracked_.push_back(core);
  }
  dispatcher_->Wake();  // It may be asleep with nothing to poll.
}

void CudaDevice::WatchEvent(std::shared_ptr<CudaEventPoint> point,
                            absl::AnyInvocable<void()> done) {
  {
    absl::MutexLock lock(&mu_);
    if (!failed()) {
      event_watches_.push_back({std::move(point), std::move(done)});
      dispatcher_->Wake();
      return;
    }
  }
  done();
}

absl::Duration CudaDevice::Tick() {
  if (Pass pass(*this); !pass || !MakeCurrent().ok()) {
    return absl::InfiniteDuration();
  }
  // Completions just run (posts come before the tick) made room.
  admission_.Pump();
  std::vector<std::shared_ptr<CudaQueueCore>> queues;
  std::vector<EventWatch> watches;
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_set<CudaQueueCore*> seen;  // Tracked more than once.
    for (auto& weak : tracked_) {
      auto core = weak.lock();
      if (core != nullptr && seen.insert(core.get()).second) {
        queues.push_back(std::move(core));
      }
    }
    tracked_.clear();
    watches.swap(event_watches_);
  }
  std::vector<std::shared_ptr<CudaQueueCore>> still;
  absl::Duration next = absl::InfiniteDuration();
  for (auto& core : queues) {
    const absl::Duration wanted = core->Tick();
    if (wanted == absl::InfiniteDuration()) continue;
    next = std::min(next, wanted);
    still.push_back(core);
  }
  std::vector<EventWatch> still_watching;
  for (auto& w : watches) {
    if (PointComplete(*this, *w.point)) {
      w.done();
    } else {
      still_watching.push_back(std::move(w));
    }
  }
  {
    // Fail() sets failed_ under mu_: either it sees these back in the lists,
    // or this sees the failure.
    absl::MutexLock lock(&mu_);
    if (!failed()) {
      for (auto& core : still) tracked_.push_back(core);
      for (auto& w : still_watching) event_watches_.push_back(std::move(w));
      // Queues tracked meanwhile woke the dispatcher: it ticks again now.
      if (!event_watches_.empty() || admission_.HasWaiting()) {
        next = std::min(next, kTickPeriod);
      }
      return next;
    }
  }
  // The device failed while these were out of the lists Fail() empties.
  const absl::Status status = failure();
  FailQueues(queues, status);
  for (auto& w : still_watching) w.done();
  return absl::InfiniteDuration();
}

absl::StatusOr<std::shared_ptr<Queue>> CudaDevice::CreateQueue(
    QueueOptions options) {
  Pass pass(*this);
  if (!pass) return PassRefused();
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  // Numerically lower is greater: the range is [greatest, least]. The
  // session layer has clamped the request to the tenant's quota already;
  // this keeps the stream within what the device offers.
  const int32_t priority = std::clamp(
      options.priority, std::min(info_.priority_greatest, info_.priority_least),
      std::max(info_.priority_greatest, info_.priority_least));
  // The queue's progress word, where the device can write it from a stream
  // (else its markers are event records).
  CudaSlotAllocator::Slot progress;
  progress.epoch = epoch();
  if (info_.supports_wait_value) {
    absl::StatusOr<CudaSlotAllocator::Slot> slot = slots_.Get();
    if (!slot.ok()) return slot.status();
    progress = *slot;
    std::atomic_ref<uint64_t>(*progress.host)
        .store(0, std::memory_order_release);
  }
  CUstream stream = nullptr;
  if (absl::Status s = Check(driver_->cuStreamCreateWithPriority(
                                 &stream, CU_STREAM_NON_BLOCKING, priority),
                             "cuStreamCreateWithPriority");
      !s.ok()) {
    if (progress.host != nullptr) slots_.Put(progress);
    return s;
  }
  std::shared_ptr<WorkAccount> account =
      options.account != nullptr ? std::move(options.account)
                                 : std::make_shared<WorkAccount>("");
  auto core = std::make_shared<CudaQueueCore>(this, stream, progress.epoch,
                                              progress, std::move(account),
                                              std::move(options.on_error));
  core->JoinAdmission(options.session_key);
  return std::shared_ptr<Queue>(new CudaQueue(std::move(core)),
                                [this](Queue* q) {
                                  cleanup_->Post([this, q] {
                                    absl::ReaderMutexLock lock(&reset_mu_);
                                    delete q;
                                  });
                                });
}

absl::StatusOr<std::shared_ptr<Event>> CudaDevice::CreateEvent(
    bool enable_timing) {
  if (failed()) return failure();
  // Native events are taken from the pool per record.
  return std::make_shared<CudaEvent>(this, enable_timing);
}

absl::StatusOr<std::shared_ptr<Flag>> CudaDevice::CreateFlag() {
  // Through the constructor, which zeroes the slot: memory of this context.
  Pass pass(*this);
  if (!pass) return PassRefused();
  auto slot = slots_.Get();
  if (!slot.ok()) return slot.status();
  return std::shared_ptr<Flag>(std::make_shared<CudaFlag>(this, *slot));
}

std::vector<std::unique_ptr<Module>> CudaDevice::BuiltinModules() {
  std::vector<std::unique_ptr<Module>> out;
  EmbeddedModule embedded = EmbeddedSamplesModule();
  if (embedded.image.empty()) return out;
  auto manifest = modules::ParseModuleManifest(
      embedded.manifest, "built-in samples manifest", "samples");
  if (!manifest.ok()) {
    log::Error("cuda_samples_refused").Status(manifest.status());
    return out;
  }
  auto module = CudaModule::Load(this, std::move(embedded.image), *manifest,
                                 "built-in samples.fatbin");
  if (!module.ok()) {
    log::Error("cuda_samples_refused").Status(module.status());
    return out;
  }
  out.push_back(*std::move(module));
  return out;
}

bool CudaDevice::IsModuleFile(const std::string& path) const {
  return absl::EndsWith(path, ".fatbin") || absl::EndsWith(path, ".cubin") ||
         absl::EndsWith(path, ".ptx");
}

absl::StatusOr<std::unique_ptr<Module>> CudaDevice::LoadModule(
    const std::string& path) {
  auto manifest = modules::ReadModuleManifest(modules::ManifestPathFor(path),
                                              modules::ImageStem(path));
  if (!manifest.ok()) {
    return absl::Status(
        manifest.status().code() == absl::StatusCode::kNotFound
            ? absl::StatusCode::kInvalidArgument
            : manifest.status().code(),
        absl::StrCat(path, ": refused: ", manifest.status().message()));
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream image;
  image << in.rdbuf();
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  }
  auto module = CudaModule::Load(this, image.str(), *manifest, path);
  if (!module.ok()) return module.status();
  return std::unique_ptr<Module>(*std::move(module));
}

}  // namespace gpustream::backend
