// Loading CUDA modules against their manifests.
#include "server/backend/cuda/cuda_module.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/backend/cuda/cuda_device.h"
#include "server/modules/module_manifest.h"

namespace gpustream::backend {

absl::StatusOr<std::unique_ptr<CudaModule>> CudaModule::Load(
    CudaDevice* device, std::string image, const v1::ModuleManifest& manifest,
    const std::string& origin) {
  // Recover reloads modules itself (Reload); a load outside it needs the
  // context alive throughout.
  CudaDevice::Pass pass(*device);
  if (!pass) return device->PassRefused();
  auto module = std::unique_ptr<CudaModule>(
      new CudaModule(device, std::move(image), origin));
  module->info_.name = manifest.name();
  for (const v1::KernelManifest& k : manifest.kernels()) {
    KernelSignature sig;
    sig.name = k.name();
    for (const v1::ParamManifest& p : k.params()) {
      sig.params.push_back(static_cast<ParamKind>(p.kind()));
    }
    module->kernels_.emplace(k.name(),
                             std::make_unique<CudaKernel>(std::move(sig)));
  }
  if (absl::Status s = module->Reload(); !s.ok()) return s;
  // Check every declared kernel against the binary, and take its layout
  // and limits from it.
  const CudaDriver& driver = device->driver();
  for (const v1::KernelManifest& k : manifest.kernels()) {
    CudaKernel& kernel = *module->kernels_[k.name()];
    std::vector<modules::BinaryParam> binary;
    for (size_t i = 0;; ++i) {
      size_t offset = 0, size = 0;
      if (driver.cuFuncGetParamInfo(kernel.function(), i, &offset, &size) !=
          CUDA_SUCCESS) {
        break;  // Past the last parameter.
      }
      binary.push_back({offset, size});
    }
    if (absl::Status s = modules::CheckKernelParams(k, binary, origin);
        !s.ok()) {
      return s;
    }
    for (const auto& b : binary) {
      kernel.signature_.layout.push_back(
          {static_cast<uint32_t>(b.size), static_cast<uint32_t>(b.offset)});
    }
    int max_threads = 0, static_shared = 0, allowed_dynamic = 0;
    driver.cuFuncGetAttribute(&max_threads,
                              CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                              kernel.function());
    driver.cuFuncGetAttribute(
        &static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.function());
    driver.cuFuncGetAttribute(&allowed_dynamic,
                              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              kernel.function());
    kernel.allowed_dynamic_.store(static_cast<uint32_t>(allowed_dynamic));
    // What a launch can really get: the device's opt-in maximum per block
    // less the kernel's static shared memory (AllowDynamicShared opts in).
    const uint32_t optin = device->info().max_shared_memory_bytes;
    const uint32_t max_dynamic =
        optin > static_cast<uint32_t>(static_shared)
            ? optin - static_cast<uint32_t>(static_shared)
            : 0;
    kernel.signature_.limits = {
        static_cast<uint32_t>(max_threads),
        static_cast<uint32_t>(static_shared),
        std::max(max_dynamic, static_cast<uint32_t>(allowed_dynamic))};
    module->info_.kernels.push_back(kernel.signature_);
  }
  // Still within the pass: a Recover after this reloads it.
  device->RememberModule(module.get());
  return module;
}

CudaModule::~CudaModule() {
  device_->ForgetModule(this);
  if (module_ == nullptr) return;
  if (CudaDevice::Pass pass(*device_, epoch_);
      pass && device_->MakeCurrent().ok()) {
    device_->driver().cuModuleUnload(module_);
  }
}

absl::Status CudaModule::Reload() {
  if (absl::Status s = device_->MakeCurrent(); !s.ok()) return s;
  const CudaDriver& driver = device_->driver();
  CUmodule module = nullptr;
  CUresult r = driver.cuModuleLoadData(&module, image_.data());
  if (r != CUDA_SUCCESS) {
    absl::Status s = ToStatus(r, "cuModuleLoadData", &driver);
    // Say what the image lacks, and how to build one that has it.
    const std::string& arch = device_->info().arch;
    const std::string hint =
        r == CUDA_ERROR_NO_BINARY_FOR_GPU
            ? absl::StrCat(" (the image has neither SASS for ", arch,
                           " nor PTX it can be compiled from: build it with "
                           "-gencode for this device)")
        : r == CUDA_ERROR_INVALID_PTX
            ? absl::StrCat(" (its PTX does not compile for ", arch, ")")
            : "";
    return absl::Status(s.code(),
                        absl::StrCat(origin_, ": ", s.message(), hint));
  }
  module_ = module;
  epoch_ = device_->epoch();
  for (auto& [name, kernel] : kernels_) {
    CUfunction fn = nullptr;
    r = driver.cuModuleGetFunction(&fn, module, name.c_str());
    if (r != CUDA_SUCCESS) {
      return absl::NotFoundError(absl::StrCat(
          origin_, ": the manifest declares kernel ", name,
          ", which the image lacks (",
          ToStatus(r, "cuModuleGetFunction", &driver).message(), ")"));
    }
    int allowed = 0;
    driver.cuFuncGetAttribute(
        &allowed, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn);
    kernel->function_.store(fn, std::memory_order_release);
    kernel->allowed_dynamic_.store(static_cast<uint32_t>(allowed),
                                   std::memory_order_release);
  }
  return absl::OkStatus();
}

absl::Status CudaKernel::AllowDynamicShared(const CudaDriver& driver,
                                            uint32_t bytes) const {
  if (bytes <= allowed_dynamic_.load(std::memory_order_acquire)) {
    return absl::OkStatus();
  }
  // Racing launches may both set it: the same value, harmless.
  const uint32_t limit = signature_.limits.max_dynamic_shared_memory_bytes;
  if (absl::Status s = ToStatus(
          driver.cuFuncSetAttribute(
              function(), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
              static_cast<int>(limit)),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", &driver);
      !s.ok()) {
    return s;
  }
  allowed_dynamic_.store(limit, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<const Kernel*> CudaModule::FindKernel(
    absl::string_view name) const {
  auto it = kernels_.find(name);
  if (it == kernels_.end()) {
    return absl::NotFoundError(
        absl::StrCat("module ", info_.name, " has no kernel '", name, "'"));
  }
  return it->second.get();
}

}  // namespace gpustream::backend
