// Fetching kernel signatures.
#include "client/kernel_signatures.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/session_core.h"

namespace gpustream::client {

std::shared_ptr<const KernelSignatures> KernelSignatures::Fetch(
    v1::GpuStream::Stub& stub, const std::string& token,
    absl::Duration timeout) {
  auto signatures = std::make_shared<KernelSignatures>();
  v1::ListModulesResponse modules;
  auto context = NewClientContext(token);
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!stub.ListModules(context.get(), {}, &modules).ok()) return signatures;
  for (const v1::Module& m : modules.modules()) {
    for (const v1::Kernel& k : m.kernels()) {
      std::vector<v1::ParamKind> params;
      for (int p : k.params()) params.push_back(static_cast<v1::ParamKind>(p));
      signatures->kinds_[m.name()][k.name()] = std::move(params);
    }
  }
  return signatures;
}

const std::vector<v1::ParamKind>* KernelSignatures::Find(
    absl::string_view module, absl::string_view kernel) const {
  auto in_module = kinds_.find(module);
  if (in_module == kinds_.end()) return nullptr;
  auto it = in_module->second.find(kernel);
  return it != in_module->second.end() ? &it->second : nullptr;
}

}  // namespace gpustream::client
