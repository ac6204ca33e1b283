// The CPU device.
#include "server/backend/cpu/cpu_device.h"

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/gpustream_cpu_module.h"
#include "server/backend/cpu/cpu_event.h"
#include "server/backend/cpu/cpu_flag.h"
#include "server/backend/cpu/cpu_module.h"
#include "server/backend/cpu/cpu_queue.h"

// The samples module, linked in from //kernels/cpu:samples.
extern "C" const GsModuleDef* gpustream_cpu_module(void);

namespace gpustream::backend {

CpuDevice::CpuDevice(const CpuDeviceOptions& options)
    : pool_(std::make_shared<CpuMemoryPool>(options.memory_limit_bytes)) {
  const unsigned threads = std::thread::hardware_concurrency();
  info_.backend = "cpu";
  info_.name = absl::StrCat("CPU (", threads, " hardware threads)");
  info_.arch = "x86_64";
  info_.multiprocessor_count = threads;
  // One worker thread per queue, at the daemon's priority: no priorities.
  info_.priority_least = 0;
  info_.priority_greatest = 0;
  info_.supports_wait_value = true;
  info_.supports_host_func = true;
  info_.supports_timing = true;
  // The limits of CUDA devices, so one launch runs the same on any backend.
  info_.max_grid = {0x7fffffffu, 65535, 65535};
  info_.max_block = {1024, 1024, 64};
  info_.max_threads_per_block = kCpuMaxThreadsPerBlock;
  info_.max_shared_memory_bytes = kCpuMaxSharedMemoryBytes;
}

MemoryInfo CpuDevice::memory() {
  return {pool_->limit(), pool_->limit() - pool_->used()};
}

absl::StatusOr<std::shared_ptr<Queue>> CpuDevice::CreateQueue(
    QueueOptions options) {
  return std::shared_ptr<Queue>(
      new CpuQueue(std::move(options.on_error)),
      [cleanup = &cleanup_](Queue* q) { cleanup->Post([q] { delete q; }); });
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
