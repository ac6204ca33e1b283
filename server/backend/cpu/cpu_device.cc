// The CPU device.
#include "server/backend/cpu/cpu_device.h"

#include <algorithm>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/gpustream_cpu_module.h"
#include "server/backend/cpu/cpu_event.h"
#include "server/backend/cpu/cpu_flag.h"
#include "server/backend/cpu/cpu_module.h"
#include "server/backend/cpu/cpu_queue.h"
#include "server/backend/cpu/cpu_scheduler.h"

// The samples module, linked in from //kernels/cpu:samples.
extern "C" const GsModuleDef* gpustream_cpu_module(void);

namespace gpustream::backend {

CpuDevice::CpuDevice(const CpuDeviceOptions& options)
    : pool_(std::make_shared<CpuMemoryPool>(options.memory_limit_bytes)),
      scheduler_(std::make_unique<CpuScheduler>(options.threads,
                                                options.kernel_time_limit)) {
  const unsigned threads = std::thread::hardware_concurrency();
  info_.backend = "cpu";
  info_.name = absl::StrCat("CPU (", threads, " hardware threads)");
  info_.arch = "x86_64";
  // The execution threads: what runs queues side by side.
  info_.multiprocessor_count = scheduler_->threads();
  // CUDA's convention: 0 is the least, numerically lower is greater (the
  // scheduler runs it first within a session).
  info_.priority_least = 0;
  info_.priority_greatest = std::min(options.priority_greatest, 0);
  info_.supports_wait_value = true;
  info_.supports_host_func = true;
  info_.supports_timing = true;
  // The limits of CUDA devices, so one launch runs the same on any backend.
  info_.max_grid = {0x7fffffffu, 65535, 65535};
  info_.max_block = {1024, 1024, 64};
  info_.max_threads_per_block = kCpuMaxThreadsPerBlock;
  info_.max_shared_memory_bytes = kCpuMaxSharedMemoryBytes;
  info_.max_cluster_size = kCpuMaxClusterSize;
  info_.supports_cooperative_launch = true;
}

CpuDevice::~CpuDevice() {
  std::vector<std::shared_ptr<CpuQueueCore>> live;
  {
    absl::MutexLock lock(&queues_mu_);
    for (auto& weak : queues_) {
      if (auto core = weak.lock()) live.push_back(std::move(core));
    }
    queues_.clear();
  }
  // By contract every CpuQueue is gone: cores still alive belong to queues
  // dropped with work left (behind a wait nobody will release, or a kernel
  // still running). Their work goes.
  const absl::Status reason =
      absl::UnavailableError("the CPU device is shutting down");
  for (auto& core : live) core->Cancel(reason);
  live.clear();
  // Dropped work's callbacks are delivered (and what they release freed)
  // while the pool still runs whatever they make runnable; then the pool
  // stops once its running turns return (a stopped kernel returns soon).
  cleanup_.Drain();
  scheduler_->Stop();
  cleanup_.Shutdown();
  // Cleanup is done: Post runs inline from here on, so whatever the
  // scheduler still releases frees at once.
  scheduler_.reset();
}

MemoryInfo CpuDevice::memory() {
  return {pool_->limit(), pool_->limit() - pool_->used()};
}

absl::StatusOr<std::shared_ptr<Queue>> CpuDevice::CreateQueue(
    QueueOptions options) {
  // Not make_shared: queues_ keeps a weak_ptr to the core until it is
  // pruned, and a weak_ptr keeps all of a make_shared allocation (the core
  // itself, 640 bytes) where a separate one keeps only the control block.
  // A crowd of 10,000 sessions of 4 queues left 32 MB so held, scattered
  // over the heap, which then could not go back to the system.
  std::shared_ptr<CpuQueueCore> core(
      new CpuQueueCore(scheduler_.get(), &cleanup_, std::move(options)));
  {
    absl::MutexLock lock(&queues_mu_);
    if (queues_.size() >= prune_at_) PruneQueuesLocked();
    queues_.push_back(core);
  }
  return std::shared_ptr<Queue>(new CpuQueue(std::move(core)),
                                [this](Queue* q) {
                                  cleanup_.Post([this, q] {
                                    delete q;
                                    QueueDestroyed();
                                  });
                                });
}

void CpuDevice::PruneQueuesLocked() {
  std::erase_if(queues_, [](const auto& weak) { return weak.expired(); });
  if (queues_.capacity() > 4 * queues_.size() + 64) queues_.shrink_to_fit();
  prune_at_ = std::max<size_t>(64, 2 * queues_.size());
  destroyed_since_prune_ = 0;
}

void CpuDevice::QueueDestroyed() {
  absl::MutexLock lock(&queues_mu_);
  // Amortized: a prune after as many destructions as half the list.
  if (2 * ++destroyed_since_prune_ >= queues_.size()) PruneQueuesLocked();
}

absl::StatusOr<std::shared_ptr<Event>> CpuDevice::CreateEvent(
    bool enable_timing) {
  return std::make_shared<CpuEvent>(enable_timing);
}

absl::StatusOr<std::shared_ptr<Flag>> CpuDevice::CreateFlag() {
  return std::make_shared<CpuFlag>();
}

absl::StatusOr<std::shared_ptr<Buffer>> CpuDevice::Allocate(uint64_t size,
                                                            MemoryKind kind) {
  auto buffer = CpuBuffer::Create(pool_, size, kind);
  if (!buffer.ok()) return buffer.status();
  return std::shared_ptr<Buffer>(
      buffer->release(),
      [cleanup = &cleanup_](Buffer* b) { cleanup->Post([b] { delete b; }); });
}

std::vector<std::unique_ptr<Module>> CpuDevice::BuiltinModules() {
  std::vector<std::unique_ptr<Module>> modules;
  auto samples = CpuModule::Create(gpustream_cpu_module(), "built-in samples");
  // The built-in table is static and tested; failing here is a build bug.
  if (samples.ok()) modules.push_back(*std::move(samples));
  return modules;
}

bool CpuDevice::IsModuleFile(const std::string& path) const {
  return absl::EndsWith(path, ".so");
}

absl::StatusOr<std::unique_ptr<Module>> CpuDevice::LoadModule(
    const std::string& path) {
  auto module = LoadCpuModule(path);
  if (!module.ok()) return module.status();
  return std::unique_ptr<Module>(*std::move(module));
}

}  // namespace gpustream::backend
