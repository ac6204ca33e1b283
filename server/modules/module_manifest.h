// The manifest of a GPU module image: path convention, parsing, checking.
#ifndef GPUSTREAM_SERVER_MODULES_MODULE_MANIFEST_H_
#define GPUSTREAM_SERVER_MODULES_MODULE_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/gpustream/v1/module_manifest.pb.h"

namespace gpustream::modules {

// Where the manifest of a module image lives: "<dir>/<stem>.manifest.textproto"
// for "<dir>/<stem>.fatbin|.cubin|.ptx". Only the last extension is replaced
// ("a/k.sm90.cubin" -> "a/k.sm90.manifest.textproto"); a path without one
// gets the suffix appended.
std::string ManifestPathFor(const std::string& image_path);

// The image's stem: its file name without the directory and last extension
// ("samples" for "/opt/m/samples.fatbin"), the default module name.
std::string ImageStem(const std::string& image_path);

// Parses `text` (protobuf text format; unknown fields are errors) and
// validates it: every kernel has a non-empty name unique in the module,
// every param a kind other than PARAM_KIND_UNSPECIFIED (and one the enum
// defines), BYTES params have size_bytes > 0, other kinds size_bytes 0,
// extents only on BUFFER params, each count naming an integer param. An
// empty `name` is replaced by `default_name`; the result's name is never
// empty. Errors are INVALID_ARGUMENT naming `origin` (the file's path) and
// the kernel and param, or for a syntax error origin:line:column.
absl::StatusOr<v1::ModuleManifest> ParseModuleManifest(
    absl::string_view text, absl::string_view origin,
    absl::string_view default_name);

// Reads the file at `path` and parses it as ParseModuleManifest does, with
// `path` as the origin. NOT_FOUND naming the path if it does not exist;
// other read errors carry the errno's code and name the path too.
absl::StatusOr<v1::ModuleManifest> ReadModuleManifest(
    const std::string& path, absl::string_view default_name);

// The index of the param of `kernel` that `extent.count_param` names, or -1
// (none named, or no such param). Param names need not be unique; the first
// matching param counts (ParseModuleManifest checks its kind).
int CountParamIndex(const v1::KernelManifest& kernel,
                    const v1::BufferExtent& extent);

// The ABI size in bytes of a parameter on the device: BUFFER 8 (a device
// pointer), I32/U32/F32 4, I64/U64/F64 8, BYTES size_bytes. 0 for
// PARAM_KIND_UNSPECIFIED or an unknown kind (which ParseModuleManifest
// rejects).
uint32_t ParamSize(const v1::ParamManifest& param);

// One kernel parameter as the binary reports it (cuFuncGetParamInfo, an AMD
// code object's metadata): its byte offset in the parameter buffer, its
// size and, where the binary says, whether it is a global buffer.
struct BinaryParam {
  enum class Kind { kUnknown, kBuffer, kValue, kOther };
  uint64_t offset;
  uint64_t size;
  Kind kind = Kind::kUnknown;
};

// Checks a kernel's declared params against `binary`, the params the binary
// reports in order: the same count, each param's ParamSize equal to the
// binary's size, and where the binary knows kinds, a BUFFER param a global
// buffer and any other a value. Offsets are not checked. INVALID_ARGUMENT
// naming `origin`, the kernel and the first mismatching param, e.g. "<origin>:
// kernel fill_u32 param 1 (value) is U32 (4 bytes) in the manifest but 8 bytes
// in the binary".
absl::Status CheckKernelParams(const v1::KernelManifest& kernel,
                               const std::vector<BinaryParam>& binary,
                               absl::string_view origin);

}  // namespace gpustream::modules

#endif  // GPUSTREAM_SERVER_MODULES_MODULE_MANIFEST_H_
