// Loading GPU modules against their manifests.
#include "server/backend/gpu/gpu_module.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/backend/gpu/gpu_device.h"
#include "server/modules/module_manifest.h"

namespace gpustream::backend {

absl::StatusOr<std::unique_ptr<GpuModule>> GpuModule::Load(
    GpuDevice* device, std::string image, const v1::ModuleManifest& manifest,
    const std::string& origin) {
  // Recover reloads modules itself (Reload); a load outside it needs the
  // context alive throughout.
  GpuDevice::Pass pass(*device);
  if (!pass) return device->PassRefused();
  auto module = std::unique_ptr<GpuModule>(
      new GpuModule(device, std::move(image), origin));
  module->info_.name = manifest.name();
  for (const v1::KernelManifest& k : manifest.kernels()) {
    KernelSignature sig;
    sig.name = k.name();
    for (const v1::ParamManifest& p : k.params()) {
      sig.params.push_back(static_cast<ParamKind>(p.kind()));
      sig.param_names.push_back(p.name());
      std::optional<BufferExtent>& extent = sig.extents.emplace_back();
      if (p.has_extent()) {
        extent =
            BufferExtent{.bytes = p.extent().bytes(),
                         .bytes_per_element = p.extent().bytes_per_element(),
                         .count_param = modules::CountParamIndex(k, p.extent()),
                         .bytes_per_thread = p.extent().bytes_per_thread()};
      }
    }
    module->kernels_.emplace(k.name(),
                             std::make_unique<GpuKernel>(std::move(sig)));
  }
  if (absl::Status s = module->Reload(); !s.ok()) return s;
  // Check every declared kernel against the binary, and take its layout
  // and limits from it.
  const GpuDriver& driver = device->driver();
  for (const v1::KernelManifest& k : manifest.kernels()) {
    GpuKernel& kernel = *module->kernels_[k.name()];
    absl::StatusOr<std::vector<GpuParamInfo>> params = driver.KernelParams(
        kernel.function(), module->image_, k.name(), device->target_id());
    if (!params.ok()) {
      return absl::Status(params.status().code(),
                          absl::StrCat(origin, ": kernel ", k.name(), ": ",
                                       params.status().message()));
    }
    std::vector<modules::BinaryParam> binary;
    for (const GpuParamInfo& p : *params) {
      // A launch packs arguments at these offsets (GpuArgBlock).
      constexpr size_t kMaxParamBytes = size_t{1} << 16;
      if (p.size > kMaxParamBytes || p.offset > kMaxParamBytes - p.size) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, ": kernel ", k.name(), " has a parameter at offset ",
            p.offset, " of ", p.size, " bytes, beyond ", kMaxParamBytes));
      }
      using Kind = modules::BinaryParam::Kind;
      const Kind kind = p.kind == GpuParamInfo::Kind::kGlobalBuffer
                            ? Kind::kBuffer
                        : p.kind == GpuParamInfo::Kind::kByValue ? Kind::kValue
                        : p.kind == GpuParamInfo::Kind::kOther   ? Kind::kOther
                                                               : Kind::kUnknown;
      binary.push_back({p.offset, p.size, kind});
    }
    if (absl::Status s = modules::CheckKernelParams(k, binary, origin);
        !s.ok()) {
      return s;
    }
    for (const auto& b : binary) {
      kernel.signature_.layout.push_back(
          {static_cast<uint32_t>(b.size), static_cast<uint32_t>(b.offset)});
    }
    const GpuFunctionLimits limits = driver.FunctionLimits(kernel.function());
    const uint32_t static_shared = limits.static_shared_bytes;
    const uint32_t allowed_dynamic = limits.allowed_dynamic_shared_bytes;
    kernel.allowed_dynamic_.store(allowed_dynamic);
    // What a launch can really get: the device's opt-in maximum per block
    // less the kernel's static shared memory (AllowDynamicShared opts in).
    const uint32_t optin = device->info().max_shared_memory_bytes;
    const uint32_t max_dynamic =
        optin > static_shared ? optin - static_shared : 0;
    kernel.signature_.limits = {limits.max_threads_per_block, static_shared,
                                std::max(max_dynamic, allowed_dynamic)};
    module->info_.kernels.push_back(kernel.signature_);
  }
  // Still within the pass: a Recover after this reloads it.
  device->RememberModule(module.get());
  return module;
}

GpuModule::~GpuModule() {
  device_->ForgetModule(this);
  if (module_ == nullptr) return;
  if (GpuDevice::Pass pass(*device_, epoch_);
      pass && device_->MakeCurrent().ok()) {
    // Not during a capture: drivers refuse it then, and break the capture.
    absl::WriterMutexLock no_capture(&device_->capture_mu());
    device_->Warn(device_->driver().ModuleUnload(module_));
  }
}

absl::Status GpuModule::Reload() {
  if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
  const GpuDriver& driver = device_->driver();
  absl::StatusOr<GpuModuleHandle> module =
      driver.ModuleLoad(image_, device_->target_id());
  if (!module.ok()) {
    return absl::Status(module.status().code(),
                        absl::StrCat(origin_, ": ", module.status().message()));
  }
  module_ = *module;
  epoch_ = device_->epoch();
  for (auto& [name, kernel] : kernels_) {
    absl::StatusOr<GpuFunctionHandle> fn = driver.ModuleFunction(module_, name);
    if (!fn.ok()) {
      return absl::NotFoundError(absl::StrCat(
          origin_, ": the manifest declares kernel ", name,
          ", which the image lacks (", fn.status().message(), ")"));
    }
    kernel->function_.store(*fn, std::memory_order_release);
    // Past the portable cluster size where the device allows it; a kernel
    // compiled with fixed cluster dimensions refuses and stays as built.
    if (device_->info().max_cluster_size > 8) {
      (void)driver.AllowNonPortableClusters(*fn);
    }
    kernel->allowed_dynamic_.store(
        driver.FunctionLimits(*fn).allowed_dynamic_shared_bytes,
        std::memory_order_release);
  }
  return absl::OkStatus();
}

absl::Status GpuKernel::AllowDynamicShared(const GpuDriver& driver,
                                           uint32_t bytes) const {
  if (bytes <= allowed_dynamic_.load(std::memory_order_acquire)) {
    return absl::OkStatus();
  }
  // Racing launches may both set it: the same value, harmless.
  const uint32_t limit = signature_.limits.max_dynamic_shared_memory_bytes;
  if (absl::Status s = driver.SetMaxDynamicShared(function(), limit); !s.ok()) {
    return s;
  }
  allowed_dynamic_.store(limit, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status GpuKernel::CheckLaunchFits(GpuDevice& device, uint32_t sms,
                                        const LaunchConfig& config) const {
  GpuDevice::Pass pass(device);
  if (!pass) return device.PassRefused();
  if (absl::Status s = device.MakeCurrent(); !s.ok()) return s;
  const GpuDriver& driver = device.driver();
  // Occupancy counts the dynamic shared memory the function may use.
  if (absl::Status s = AllowDynamicShared(driver, config.shared_memory_bytes);
      !s.ok()) {
    return device.Check(s);
  }
  if (config.cooperative) {
    const uint64_t threads = config.block.Volume();
    absl::StatusOr<uint32_t> per_sm = driver.ResidentBlocksPerSm(
        function(), static_cast<uint32_t>(threads), config.shared_memory_bytes);
    if (!per_sm.ok()) return device.Check(per_sm.status());
    const uint64_t resident = uint64_t{*per_sm} * sms;
    if (config.grid.Volume() > resident) {
      return absl::OutOfRangeError(absl::StrCat(
          "cooperative grid of ", config.grid.Volume(), " blocks: kernel ",
          signature_.name, " holds at most ", resident,
          " blocks resident at once with blocks of ", threads, " threads and ",
          config.shared_memory_bytes, " bytes of dynamic shared memory (",
          *per_sm, " per SM x ", sms, " SMs)"));
    }
  }
  if (config.clustered) {
    absl::StatusOr<uint32_t> most = driver.MaxClusterSize(function(), config);
    if (!most.ok()) return device.Check(most.status());
    if (config.cluster.Volume() > *most) {
      return absl::OutOfRangeError(
          absl::StrCat("cluster of ", config.cluster.Volume(),
                       " blocks: kernel ", signature_.name, " allows at most ",
                       *most, " with this block size and shared memory"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const Kernel*> GpuModule::FindKernel(
    absl::string_view name) const {
  auto it = kernels_.find(name);
  if (it == kernels_.end()) {
    return absl::NotFoundError(
        absl::StrCat("module ", info_.name, " has no kernel '", name, "'"));
  }
  return it->second.get();
}

}  // namespace gpustream::backend
