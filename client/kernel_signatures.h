// The parameter kinds of the daemon's kernels, fetched once with
// ListModules when the client connects, so launches can be checked and
// converted before they are sent without a round trip of their own.
#ifndef GPUSTREAM_CLIENT_KERNEL_SIGNATURES_H_
#define GPUSTREAM_CLIENT_KERNEL_SIGNATURES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/gpustream/v1/gpustream.grpc.pb.h"

namespace gpustream::client {

// Immutable once fetched: thread-safe.
class KernelSignatures {
 public:
  // The daemon's kernels, asked with ListModules (bounded by `timeout`).
  // A daemon that does not answer gives an empty set: launches are then
  // sent as written and the daemon judges them.
  static std::shared_ptr<const KernelSignatures> Fetch(
      v1::GpuStream::Stub& stub, const std::string& token,
      absl::Duration timeout);

  // The declared parameter kinds of `module`.`kernel`, or null when the
  // daemon has no such kernel (the launch is sent as written, and the
  // daemon answers NOT_FOUND). Modules are loaded when the daemon starts,
  // so what was fetched stays true while it runs.
  const std::vector<v1::ParamKind>* Find(absl::string_view module,
                                         absl::string_view kernel) const;

 private:
  // module -> kernel -> kinds (string_view lookups: a launch allocates
  // nothing to find its kernel).
  absl::flat_hash_map<
      std::string, absl::flat_hash_map<std::string, std::vector<v1::ParamKind>>>
      kinds_;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_KERNEL_SIGNATURES_H_
