// Parsing and checking of module manifests (module_manifest.proto).
#include "server/modules/module_manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/text_format.h"

namespace gpustream::modules {
namespace {

// Larger files are rejected unread: no manifest comes near this.
constexpr int64_t kMaxManifestBytes = int64_t{16} << 20;

// Offset of the last extension's dot in the path's file name, or npos. A
// leading dot (".hidden") starts no extension.
size_t ExtensionDot(const std::string& path) {
  const size_t slash = path.rfind('/');
  const size_t name = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || dot <= name) return std::string::npos;
  return dot;
}

// Gathers the parser's errors as "origin:line:column: message".
class Collector : public google::protobuf::io::ErrorCollector {
 public:
  explicit Collector(absl::string_view origin) : origin_(origin) {}

  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    // The parser's numbers are 0-based; editors count from 1.
    errors_.push_back(
        absl::StrCat(origin_, ":", line + 1, ":", column + 1, ": ", message));
  }

  std::string Joined() const { return absl::StrJoin(errors_, "; "); }

 private:
  const absl::string_view origin_;
  std::vector<std::string> errors_;
};

// "U32" for PARAM_KIND_U32; the number for a kind the enum lacks.
std::string KindName(v1::ParamKind kind) {
  const std::string& name = v1::ParamKind_Name(kind);
  if (name.empty()) return absl::StrCat("kind ", static_cast<int>(kind));
  return absl::StartsWith(name, "PARAM_KIND_")
             ? name.substr(sizeof("PARAM_KIND_") - 1)
             : name;
}

// "param 1 (value)", or "param 1" for a param without a name.
std::string DescribeParam(int index, const v1::ParamManifest& param) {
  if (param.name().empty()) return absl::StrCat("param ", index);
  return absl::StrCat("param ", index, " (", param.name(), ")");
}

absl::Status CheckParam(const v1::ParamManifest& param, int index,
                        absl::string_view kernel, absl::string_view origin) {
  const auto where = [&] {
    return absl::StrCat(origin, ": kernel ", kernel, " ",
                        DescribeParam(index, param));
  };
  if (param.kind() == v1::PARAM_KIND_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), " has no kind (PARAM_KIND_UNSPECIFIED)"));
  }
  if (!v1::ParamKind_IsValid(param.kind())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), " has unknown kind ", static_cast<int>(param.kind())));
  }
  if (param.kind() == v1::PARAM_KIND_BYTES) {
    if (param.size_bytes() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), " is BYTES but has no size_bytes (> 0)"));
    }
  } else if (param.size_bytes() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), " is ", KindName(param.kind()), " but sets size_bytes (",
        param.size_bytes(), "), which only BYTES params take"));
  }
  return absl::OkStatus();
}

// A BUFFER param's extent: only BUFFER params have one; a count needs its
// bytes per element and the other way round, and names another param of
// the kernel with an integer kind.
absl::Status CheckExtent(const v1::KernelManifest& kernel, int index,
                         absl::string_view origin) {
  const v1::ParamManifest& param = kernel.params(index);
  if (!param.has_extent()) return absl::OkStatus();
  const auto where = [&] {
    return absl::StrCat(origin, ": kernel ", kernel.name(), " ",
                        DescribeParam(index, param));
  };
  if (param.kind() != v1::PARAM_KIND_BUFFER) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), " is ", KindName(param.kind()),
                     " but declares an extent, which only BUFFER params take"));
  }
  const v1::BufferExtent& extent = param.extent();
  if (extent.count_param().empty() != (extent.bytes_per_element() == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), "'s extent sets ",
        extent.count_param().empty() ? "bytes_per_element without count_param"
                                     : "count_param without bytes_per_element",
        ": each needs the other"));
  }
  if (extent.count_param().empty()) return absl::OkStatus();
  const int count = CountParamIndex(kernel, extent);
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), "'s extent counts param '", extent.count_param(),
                     "', which the kernel does not have"));
  }
  const v1::ParamKind kind = kernel.params(count).kind();
  if (kind != v1::PARAM_KIND_I32 && kind != v1::PARAM_KIND_U32 &&
      kind != v1::PARAM_KIND_I64 && kind != v1::PARAM_KIND_U64) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), "'s extent counts param '", extent.count_param(), "', a ",
        KindName(kind), ": a count must be I32, U32, I64 or U64"));
  }
  return absl::OkStatus();
}

}  // namespace

int CountParamIndex(const v1::KernelManifest& kernel,
                    const v1::BufferExtent& extent) {
  if (extent.count_param().empty()) return -1;
  for (int p = 0; p < kernel.params_size(); ++p) {
    if (kernel.params(p).name() == extent.count_param()) return p;
  }
  return -1;
}

std::string ManifestPathFor(const std::string& image_path) {
  const size_t dot = ExtensionDot(image_path);
  return absl::StrCat(
      dot == std::string::npos ? image_path : image_path.substr(0, dot),
      ".manifest.textproto");
}

std::string ImageStem(const std::string& image_path) {
  const size_t slash = image_path.rfind('/');
  const size_t begin = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = ExtensionDot(image_path);
  const size_t end = dot == std::string::npos ? image_path.size() : dot;
  return image_path.substr(begin, end - begin);
}

absl::StatusOr<v1::ModuleManifest> ParseModuleManifest(
    absl::string_view text, absl::string_view origin,
    absl::string_view default_name) {
  if (text.size() > static_cast<size_t>(kMaxManifestBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": ", text.size(), " bytes is too large for a manifest"));
  }
  v1::ModuleManifest manifest;
  Collector errors(origin);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  google::protobuf::io::ArrayInputStream input(text.data(),
                                               static_cast<int>(text.size()));
  if (!parser.Parse(&input, &manifest)) {
    std::string joined = errors.Joined();
    if (joined.empty()) joined = absl::StrCat(origin, ": not a ModuleManifest");
    return absl::InvalidArgumentError(joined);
  }
  if (manifest.name().empty()) manifest.set_name(std::string(default_name));
  if (manifest.name().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": the module has no name"));
  }
  absl::flat_hash_set<absl::string_view> names;
  for (int k = 0; k < manifest.kernels_size(); ++k) {
    const v1::KernelManifest& kernel = manifest.kernels(k);
    if (kernel.name().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": the kernel at index ", k, " has no name"));
    }
    if (!names.insert(kernel.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": kernel ", kernel.name(), " is declared twice"));
    }
    for (int p = 0; p < kernel.params_size(); ++p) {
      absl::Status status =
          CheckParam(kernel.params(p), p, kernel.name(), origin);
      if (status.ok()) status = CheckExtent(kernel, p, origin);
      if (!status.ok()) return status;
    }
  }
  return manifest;
}

absl::StatusOr<v1::ModuleManifest> ReadModuleManifest(
    const std::string& path, absl::string_view default_name) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such manifest file"));
    }
    return absl::ErrnoToStatus(error, absl::StrCat(path, ": cannot open"));
  }
  struct stat st;
  std::string text;
  absl::Status status;
  if (fstat(fd, &st) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot stat"));
  } else if (!S_ISREG(st.st_mode)) {
    status =
        absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  } else if (st.st_size > kMaxManifestBytes) {
    status = absl::InvalidArgumentError(absl::StrCat(
        path, ": ", st.st_size, " bytes is too large for a manifest"));
  } else {
    char buffer[8192];
    for (;;) {
      const ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status =
            absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read"));
        break;
      }
      if (n == 0) break;
      text.append(buffer, static_cast<size_t>(n));
      if (static_cast<int64_t>(text.size()) > kMaxManifestBytes) {
        status = absl::InvalidArgumentError(
            absl::StrCat(path, ": too large for a manifest"));
        break;
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return ParseModuleManifest(text, path, default_name);
}

uint32_t ParamSize(const v1::ParamManifest& param) {
  switch (param.kind()) {
    case v1::PARAM_KIND_BUFFER:
    case v1::PARAM_KIND_I64:
    case v1::PARAM_KIND_U64:
    case v1::PARAM_KIND_F64:
      return 8;
    case v1::PARAM_KIND_I32:
    case v1::PARAM_KIND_U32:
    case v1::PARAM_KIND_F32:
      return 4;
    case v1::PARAM_KIND_BYTES:
      return param.size_bytes();
    default:
      return 0;
  }
}

absl::Status CheckKernelParams(const v1::KernelManifest& kernel,
                               const std::vector<BinaryParam>& binary,
                               absl::string_view origin) {
  if (static_cast<size_t>(kernel.params_size()) != binary.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": kernel ", kernel.name(), " declares ", kernel.params_size(),
        " params, the binary has ", binary.size()));
  }
  for (int p = 0; p < kernel.params_size(); ++p) {
    const v1::ParamManifest& param = kernel.params(p);
    const uint32_t size = ParamSize(param);
    if (size != binary[p].size) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": kernel ", kernel.name(), " ",
                       DescribeParam(p, param), " is ", KindName(param.kind()),
                       " (", size, " bytes) in the manifest but ",
                       binary[p].size, " bytes in the binary"));
    }
    using Kind = BinaryParam::Kind;
    const Kind kind = binary[p].kind;
    const bool buffer = param.kind() == v1::PARAM_KIND_BUFFER;
    if (kind != Kind::kUnknown &&
        kind != (buffer ? Kind::kBuffer : Kind::kValue)) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": kernel ", kernel.name(), " ", DescribeParam(p, param),
          " is ", KindName(param.kind()), " in the manifest but ",
          kind == Kind::kBuffer  ? "a global buffer"
          : kind == Kind::kValue ? "a value"
                                 : "neither a global buffer nor a value",
          " in the binary"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gpustream::modules
