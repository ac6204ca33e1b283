// The GPU device: context, properties, object factory, health.
#include "server/backend/gpu/gpu_device.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/backend/gpu/gpu_module.h"
#include "server/backend/gpu/gpu_queue.h"
#include "server/backend/gpu/gpu_sm_partition.h"
#include "server/log/log.h"
#include "server/modules/module_manifest.h"

namespace gpustream::backend {
namespace {

// Dispatcher tick while host event waiters or admission waiters need
// polling (queues say what they need: GpuQueueCore::Tick).
constexpr absl::Duration kTickPeriod = absl::Microseconds(250);

// The context current on this thread, and the device (by instance number:
// an address may be reused by a later device, whose driver's first context
// may have the same handle) and epoch it was made current for.
std::atomic<uint64_t> next_instance{1};
thread_local uint64_t current_device = 0;
thread_local GpuContextHandle current_context = nullptr;
thread_local uint64_t current_epoch = 0;

}  // namespace

absl::StatusOr<std::unique_ptr<GpuDevice>> GpuDevice::Create(
    std::shared_ptr<const GpuDriver> driver, int ordinal,
    EmbeddedModule samples, bool own_context) {
  auto device = std::unique_ptr<GpuDevice>(new GpuDevice(
      std::move(driver), ordinal, std::move(samples), own_context));
  absl::StatusOr<GpuContextHandle> context = device->AcquireContext();
  if (!context.ok()) {
    device->context_.store(nullptr);  // Nothing for the destructor to let go.
    return context.status();
  }
  device->context_.store(*context, std::memory_order_release);
  if (absl::Status s = device->ReadInfo(); !s.ok()) return s;
  device->cleanup_ = std::make_unique<util::SerialExecutor>();
  GpuDevice* raw = device.get();
  device->dispatcher_ = std::make_unique<GpuDispatcher>(
      [raw] { raw->MakeCurrent().IgnoreError(); },
      [raw] { return raw->Tick(); });
  return device;
}

absl::StatusOr<GpuContextHandle> GpuDevice::AcquireContext() {
  if (own_context_) return driver_->ContextCreate(ordinal_);
  return driver_->PrimaryContextRetain(ordinal_);
}

void GpuDevice::ReleaseContext() {
  const GpuContextHandle context = context_.exchange(nullptr);
  if (context == nullptr) return;
  if (own_context_) {
    driver_->ContextDestroy(context).IgnoreError();
    current_context = nullptr;  // It was current here; it is gone.
  } else {
    driver_->PrimaryContextRelease(ordinal_).IgnoreError();
  }
}

GpuDevice::~GpuDevice() {
  if (dispatcher_ == nullptr) {
    // Create failed after acquiring the context (its properties could not
    // be read): no thread and no object was started.
    ReleaseContext();
    return;
  }
  // The dispatcher first, so that no tick holds queues out of the lists
  // below; from then on posts run on the poster's thread.
  dispatcher_->Shutdown();
  // Work that never completed (a stream stuck at shutdown) completes with
  // an error, so nothing it holds outlives the device; host event waits
  // end too.
  std::vector<std::shared_ptr<GpuQueueCore>> stuck;
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
  const absl::Status shutdown = absl::UnavailableError(
      absl::StrCat("the ", traits().display_name, " device is shutting down"));
  for (auto& core : stuck) core->Fail(shutdown);
  stuck.clear();
  for (auto& w : watches) w.watch->Run();
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
      driver_->StreamSynchronize(memory_stream_).IgnoreError();  // Frees done.
      driver_->StreamDestroy(memory_stream_).IgnoreError();
    }
    events_.FreeAll();
    staging_.FreeAll();
    slots_.FreeAll();
  }
  ReleaseContext();
}

absl::StatusOr<std::vector<std::unique_ptr<Device>>> GpuDevice::CreateAll(
    std::shared_ptr<const GpuDriver> driver, const EmbeddedModule& samples) {
  absl::StatusOr<int> count = driver->DeviceCount();
  if (!count.ok()) return count.status();
  if (*count == 0) {
    return absl::UnavailableError(
        absl::StrCat("no ", driver->traits().display_name, " device"));
  }
  std::vector<std::unique_ptr<Device>> devices;
  for (int i = 0; i < *count; ++i) {
    auto device = Create(driver, i, samples);
    if (!device.ok()) return device.status();
    devices.push_back(*std::move(device));
  }
  return devices;
}

uint64_t GpuDevice::NextInstance() { return next_instance.fetch_add(1); }

absl::Status GpuDevice::MakeCurrent() {
  const uint64_t epoch = this->epoch();
  const GpuContextHandle context = context_.load(std::memory_order_acquire);
  if (current_device == instance_ && current_context == context &&
      current_epoch == epoch) {
    return absl::OkStatus();
  }
  absl::Status s = driver_->SetCurrent(context);
  if (s.ok()) {
    current_device = instance_;
    current_context = context;
    current_epoch = epoch;
  }
  return s;
}

absl::Status GpuDevice::ReadInfo() {
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  absl::StatusOr<GpuDeviceProperties> p = driver_->DeviceProperties(ordinal_);
  if (!p.ok()) return p.status();
  info_ = std::move(p->info);
  info_.backend = traits().name;
  info_.supports_host_func = true;
  info_.supports_timing = true;
  info_.native_wait_value = traits().native_wait_value;
  info_.faults_recoverable = traits().faults_recoverable;
  target_id_ = p->target_id.empty() ? info_.arch : p->target_id;
  pools_ = p->memory_pools;
  return absl::OkStatus();
}

GpuDevice::Pass::Pass(GpuDevice& device, uint64_t epoch, Kind kind)
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

GpuDevice::Pass::~Pass() {
  if (granted_) device_.passes_.fetch_sub(1);
}

absl::Status GpuDevice::PassRefused() {
  if (failed()) return failure();
  return absl::AbortedError(absl::StrCat(
      traits().display_name, " device ", ordinal_,
      " was reset after a failure: objects of its previous context are gone"));
}

MemoryInfo GpuDevice::memory() {
  size_t free = 0, total = 0;
  if (Pass pass(*this); pass && MakeCurrent().ok()) {
    driver_->MemGetInfo(&free, &total).IgnoreError();  // Zeros on error.
  }
  if (total == 0) {
    if (absl::StatusOr<uint64_t> t = driver_->DeviceTotalMemory(ordinal_);
        t.ok()) {
      total = *t;
    }
  }
  return {total, free, traits().device_page_bytes};
}

void GpuDevice::SetFatalErrorHandler(FatalErrorHandler handler) {
  absl::MutexLock lock(&handler_mu_);
  on_fatal_ = std::move(handler);
}

void GpuDevice::RememberModule(GpuModule* module) {
  absl::MutexLock lock(&mu_);
  modules_.push_back(module);
}

void GpuDevice::ForgetModule(GpuModule* module) {
  absl::MutexLock lock(&mu_);
  std::erase(modules_, module);
}

void GpuDevice::HoldUntilIdle(std::shared_ptr<GpuQueueCore> core) {
  absl::MutexLock lock(&mu_);
  retired_.emplace(core.get(), std::move(core));
}

void GpuDevice::LetGo(GpuQueueCore* core) {
  std::shared_ptr<GpuQueueCore> held;
  {
    absl::MutexLock lock(&mu_);
    auto it = retired_.find(core);
    if (it == retired_.end()) return;
    held = std::move(it->second);
    retired_.erase(it);
  }
  cleanup_->Post([held = std::move(held)] {});
}

absl::Status GpuDevice::failure() {
  absl::MutexLock lock(&mu_);
  return failure_;
}

absl::Status GpuDevice::CheckFailed(absl::Status status) {
  // GpuDriver maps exactly the errors that lose the context to ABORTED.
  if (status.code() != absl::StatusCode::kAborted) return status;
  // Whichever call notices a lost context, the caller hears that the device
  // failed and why, not that its own call did.
  Fail(std::move(status));
  return failure();
}

void GpuDevice::Warn(absl::Status status) {
  if (status.ok()) return;
  log::Warning(absl::StrCat(traits().name, "_call_failed"))
      .Num("device", ordinal_)
      .Status(Check(std::move(status)));
}

void GpuDevice::Fail(absl::Status status) {
  std::vector<std::shared_ptr<GpuQueueCore>> queues;
  std::vector<EventWatch> watches;
  {
    absl::MutexLock lock(&mu_);
    if (failed_.exchange(true)) return;  // Reported once per failure.
    failure_ = absl::AbortedError(
        absl::StrCat(traits().display_name, " device ", ordinal_,
                     own_context_ ? " (a tenant's context)" : "",
                     " failed: ", status.message()));
    status = failure_;
    for (auto& weak : tracked_) {
      if (auto core = weak.lock()) queues.push_back(std::move(core));
    }
    tracked_.clear();
    watches.swap(event_watches_);
  }
  log::Error(absl::StrCat(traits().name, "_device_failed"))
      .Num("device", ordinal_)
      .Status(status);
  // On the dispatcher: the caller may hold a queue's lock (a failed launch).
  // A tick in progress (which may be the caller) finishes first, failing
  // the queues it held, so the handler hears of every queue.
  dispatcher_->Post([this, queues = std::move(queues),
                     watches = std::move(watches), status]() mutable {
    FailQueues(queues, status);
    for (auto& w : watches) w.watch->Run();
    DeviceFailure failure{status, {}};
    {
      absl::MutexLock lock(&mu_);
      failure.sessions_with_kernels.swap(failed_sessions_);
    }
    absl::MutexLock lock(&handler_mu_);
    if (on_fatal_) on_fatal_(failure);
  });
}

void GpuDevice::FailQueues(std::vector<std::shared_ptr<GpuQueueCore>>& queues,
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

absl::Status GpuDevice::Recover() {
  if (!failed()) return absl::OkStatus();
  if (!traits().context_reset) {
    // A reset that frees nothing would leak every object of the failed
    // context and serve a device whose state nobody knows.
    return absl::AbortedError(absl::StrCat(
        traits().display_name, " device ", ordinal_,
        " cannot be reset within this process (the runtime's primary "
        "context reset does nothing): restart the daemon"));
  }
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
  // dropped (GpuSlotAllocator::Put), so none survives into the new one,
  // whose reset frees the old slabs.
  slots_.Forget();
  // A context of its own is replaced; the primary one is reset (which
  // destroys its objects) and retained again.
  if (!own_context_) {
    if (absl::Status s = Check(driver_->PrimaryContextReset(ordinal_));
        !s.ok()) {
      return s;
    }
  }
  ReleaseContext();
  absl::StatusOr<GpuContextHandle> context = AcquireContext();
  if (!context.ok()) return Check(context.status());
  context_.store(*context, std::memory_order_release);
  current_context = nullptr;
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  // Prove the device before serving it again: a reset is not promised to
  // clear a sticky error (cuda.h: "the process must be terminated and
  // relaunched"), and a dead GPU must not be served as a live one. An
  // allocation, a memset and a stream synchronize reach the device.
  GpuDeviceptr probe = 0;
  bool pooled = false;
  if (absl::Status s = AllocateDevice(4, &probe, &pooled); !s.ok()) {
    return absl::AbortedError(absl::StrCat(
        traits().display_name, " device ", ordinal_,
        " still fails after a reset (only a new process can clear a "
        "process-fatal error): ",
        s.message()));
  }
  FreeDevice(probe, pooled);
  std::vector<GpuModule*> modules;
  {
    absl::MutexLock lock(&mu_);
    modules = modules_;
  }
  for (GpuModule* m : modules) {
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

void GpuDevice::Release(uint64_t epoch, absl::AnyInvocable<void()> fn) {
  cleanup_->Post([this, epoch, fn = std::move(fn)]() mutable {
    absl::ReaderMutexLock lock(&reset_mu_);
    if (epoch != this->epoch() || !MakeCurrent().ok()) return;
    fn();
  });
}

void GpuDevice::Track(std::shared_ptr<GpuQueueCore> core) {
  absl::Status failure;
  {
    absl::MutexLock lock(&mu_);
    if (!failed()) {
      tracked_.push_back(std::move(core));
    } else {
      failure = failure_;
    }
  }
  if (failure.ok()) {
    dispatcher_->Wake();  // It may be asleep with nothing to poll.
    return;
  }
  // Failed: no tick polls the device, and Fail() took the queues tracked
  // then. Work this one holds since (an OnIdle's no-op) fails too, on the
  // dispatcher (the caller holds the queue's lock). After Shutdown(), the
  // device's destructor fails what is tracked.
  absl::AnyInvocable<void()> fail = [core, failure] { core->Fail(failure); };
  if (!dispatcher_->TryPost(fail)) {
    absl::MutexLock lock(&mu_);
    tracked_.push_back(std::move(core));
  }
}

std::shared_ptr<Watch> GpuDevice::WatchEvent(
    std::shared_ptr<GpuEventPoint> point, absl::AnyInvocable<void()> done) {
  {
    absl::MutexLock lock(&mu_);
    if (!failed()) {
      auto watch = std::make_shared<WatchFor<>>(std::move(done));
      event_watches_.push_back({std::move(point), watch});
      dispatcher_->Wake();
      return watch;
    }
  }
  done();
  return nullptr;
}

absl::Duration GpuDevice::Tick() {
  if (Pass pass(*this); !pass || !MakeCurrent().ok()) {
    return absl::InfiniteDuration();
  }
  // Completions just run (posts come before the tick) made room.
  admission_.Pump();
  std::vector<std::shared_ptr<GpuQueueCore>> queues;
  std::vector<EventWatch> watches;
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_set<GpuQueueCore*> seen;  // Tracked more than once.
    for (auto& weak : tracked_) {
      auto core = weak.lock();
      if (core != nullptr && seen.insert(core.get()).second) {
        queues.push_back(std::move(core));
      }
    }
    tracked_.clear();
    watches.swap(event_watches_);
  }
  std::vector<std::shared_ptr<GpuQueueCore>> still;
  absl::Duration next = absl::InfiniteDuration();
  for (auto& core : queues) {
    const absl::Duration wanted = core->Tick();
    if (wanted == absl::InfiniteDuration()) continue;
    next = std::min(next, wanted);
    still.push_back(core);
  }
  std::vector<EventWatch> still_watching;
  for (auto& w : watches) {
    if (w.watch->cancelled()) continue;  // Dropped unasked.
    if (PointComplete(*this, *w.point)) {
      w.watch->Run();
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
  for (auto& w : still_watching) w.watch->Run();
  return absl::InfiniteDuration();
}

absl::StatusOr<std::shared_ptr<Queue>> GpuDevice::CreateQueue(
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
  GpuSlotAllocator::Slot progress;
  progress.epoch = epoch();
  if (info_.supports_wait_value) {
    absl::StatusOr<GpuSlotAllocator::Slot> slot = slots_.Get();
    if (!slot.ok()) return slot.status();
    progress = *slot;
    std::atomic_ref<uint64_t>(*progress.host)
        .store(0, std::memory_order_release);
  }
  // On the partition's SMs (its green context's stream) if it has one.
  GpuSmPartition* partition = nullptr;
  if (options.partition != nullptr) {
    partition = dynamic_cast<GpuSmPartition*>(options.partition.get());
    if (partition == nullptr || partition->device() != this ||
        partition->epoch() != epoch()) {
      if (progress.host != nullptr) slots_.Put(progress);
      // A reset came between the placement and this: retry (a new
      // session splits again).
      return absl::UnavailableError(absl::StrCat(
          "the SM partition is not one of ", traits().display_name, " device ",
          ordinal_, "'s current context (it was reset): open a new session"));
    }
  }
  absl::StatusOr<GpuStreamHandle> stream =
      partition != nullptr ? partition->CreateStream(priority)
                           : driver_->StreamCreate(priority);
  if (!stream.ok()) {
    if (progress.host != nullptr) slots_.Put(progress);
    return Check(stream.status());
  }
  std::shared_ptr<WorkAccount> account =
      options.account != nullptr ? std::move(options.account)
                                 : std::make_shared<WorkAccount>("");
  auto core = std::make_shared<GpuQueueCore>(
      this, *stream, progress.epoch, progress, std::move(account),
      std::move(options.on_error), std::move(options.partition));
  core->JoinAdmission(options.session_key);
  return std::shared_ptr<Queue>(new GpuQueue(std::move(core)),
                                [this](Queue* q) {
                                  cleanup_->Post([this, q] {
                                    absl::ReaderMutexLock lock(&reset_mu_);
                                    delete q;
                                  });
                                });
}

absl::StatusOr<std::shared_ptr<Event>> GpuDevice::CreateEvent(
    bool enable_timing) {
  if (failed()) return failure();
  // Native events are taken from the pool per record.
  return std::make_shared<GpuEvent>(this, enable_timing);
}

absl::StatusOr<std::shared_ptr<Flag>> GpuDevice::CreateFlag() {
  // Through the constructor, which zeroes the slot: memory of this context.
  Pass pass(*this);
  if (!pass) return PassRefused();
  auto slot = slots_.Get();
  if (!slot.ok()) return slot.status();
  return std::shared_ptr<Flag>(std::make_shared<GpuFlag>(this, *slot));
}

std::vector<std::unique_ptr<Module>> GpuDevice::BuiltinModules() {
  std::vector<std::unique_ptr<Module>> out;
  if (samples_.image.empty()) return out;
  const std::string refused = absl::StrCat(traits().name, "_samples_refused");
  auto manifest = modules::ParseModuleManifest(
      samples_.manifest, "built-in samples manifest", "samples");
  if (!manifest.ok()) {
    log::Error(refused).Status(manifest.status());
    return out;
  }
  auto module = GpuModule::Load(this, samples_.image, *manifest,
                                absl::StrCat("built-in ", samples_.file_name));
  if (!module.ok()) {
    log::Error(refused).Status(module.status());
    return out;
  }
  out.push_back(*std::move(module));
  return out;
}

absl::StatusOr<std::unique_ptr<Device>> GpuDevice::CreateContext() {
  // Fails fast (UNIMPLEMENTED) where the vendor has no such contexts.
  absl::StatusOr<std::unique_ptr<GpuDevice>> made =
      Create(driver_, ordinal_, samples_, /*own_context=*/true);
  if (!made.ok()) return made.status();
  // The adapter popped the context cuCtxCreate pushed; MakeCurrent's cache
  // is keyed by device instance, so the new device sets its own context.
  return std::unique_ptr<Device>(*std::move(made));
}

absl::StatusOr<std::vector<std::shared_ptr<SmPartition>>>
GpuDevice::PartitionSms(const std::vector<uint32_t>& weights) {
  Pass pass(*this);
  if (!pass) return PassRefused();
  if (absl::Status s = MakeCurrent(); !s.ok()) return s;
  absl::StatusOr<GpuSmLayout> layout = driver_->SmLayout(ordinal_);
  if (!layout.ok()) return layout.status();
  if (layout->group_sms == 0 || layout->groups == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(traits().display_name, " device ", ordinal_, " has ",
                     layout->sm_count, " SMs: too few to partition"));
  }
  absl::StatusOr<std::vector<uint32_t>> groups =
      SizeSmPartitions(weights, layout->groups);
  if (!groups.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(traits().display_name, " device ", ordinal_, " (",
                     layout->sm_count, " SMs in groups of ", layout->group_sms,
                     "): ", groups.status().message()));
  }
  absl::StatusOr<std::vector<GpuGreenContext>> greens =
      driver_->GreenContextsCreate(ordinal_, layout->group_sms, *groups);
  if (!greens.ok()) return Check(greens.status());
  std::vector<std::shared_ptr<SmPartition>> partitions;
  for (const GpuGreenContext& green : *greens) {
    partitions.push_back(std::make_shared<GpuSmPartition>(
        this, epoch(), green.handle, green.sm_count));
  }
  return partitions;
}

bool GpuDevice::IsModuleFile(const std::string& path) const {
  return absl::c_any_of(traits().module_extensions,
                        [&](const std::string& extension) {
                          return absl::EndsWith(path, extension);
                        });
}

absl::StatusOr<std::unique_ptr<Module>> GpuDevice::LoadModule(
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
  auto module = GpuModule::Load(this, image.str(), *manifest, path);
  if (!module.ok()) return module.status();
  return std::unique_ptr<Module>(*std::move(module));
}

}  // namespace gpustream::backend
