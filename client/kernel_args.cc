// Converting launch arguments to the declared parameter kinds.
#include "client/kernel_args.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpustream::client {
namespace {

std::string KindName(v1::ParamKind kind) {
  std::string name = v1::ParamKind_Name(kind);
  constexpr absl::string_view kPrefix = "PARAM_KIND_";
  if (absl::StartsWith(name, kPrefix)) name = name.substr(kPrefix.size());
  return name.empty() ? absl::StrCat("kind ", static_cast<int>(kind)) : name;
}

std::string Written(const v1::KernelArg& arg) {
  switch (arg.value_case()) {
    case v1::KernelArg::kI32:
      return absl::StrCat("integer ", arg.i32());
    case v1::KernelArg::kU32:
      return absl::StrCat("integer ", arg.u32());
    case v1::KernelArg::kI64:
      return absl::StrCat("integer ", arg.i64());
    case v1::KernelArg::kU64:
      return absl::StrCat("integer ", arg.u64());
    case v1::KernelArg::kF32:
      return absl::StrCat("float ", arg.f32());
    case v1::KernelArg::kF64:
      return absl::StrCat("double ", arg.f64());
    case v1::KernelArg::kBuffer:
      return absl::StrCat("buffer ", arg.buffer().buffer_id());
    case v1::KernelArg::kBytes:
      return absl::StrCat(arg.bytes().size(), " bytes");
    default:
      return "a value";
  }
}

// An integer argument as written: its magnitude and sign.
struct Integer {
  bool negative;
  uint64_t magnitude;  // |value|, exact for every int64 and uint64.
};

Integer IntegerOf(const v1::KernelArg& arg) {
  if (arg.value_case() == v1::KernelArg::kU64) return {false, arg.u64()};
  if (arg.value_case() == v1::KernelArg::kU32) return {false, arg.u32()};
  const int64_t v =
      arg.value_case() == v1::KernelArg::kI32 ? arg.i32() : arg.i64();
  return v < 0 ? Integer{true, uint64_t{0} - static_cast<uint64_t>(v)}
               : Integer{false, static_cast<uint64_t>(v)};
}

// Whether `v` fits [-(low_magnitude), high].
bool Fits(Integer v, uint64_t low_magnitude, uint64_t high) {
  return v.negative ? v.magnitude <= low_magnitude : v.magnitude <= high;
}

}  // namespace

absl::StatusOr<std::vector<v1::KernelArg>> ConvertArgs(
    absl::string_view module, absl::string_view kernel,
    const std::vector<v1::ParamKind>& params, absl::Span<const Arg> args) {
  // Named only in errors: a launch that converts builds no string.
  auto name = [&] { return absl::StrCat(module, ".", kernel); };
  if (args.size() != params.size()) {
    std::vector<std::string> kinds;
    for (v1::ParamKind kind : params) kinds.push_back(KindName(kind));
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ", name(), " takes ", params.size(), " argument(s) (",
        absl::StrJoin(kinds, ", "), "), got ", args.size()));
  }
  std::vector<v1::KernelArg> out(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const v1::KernelArg& arg = args[i].proto();
    const v1::ParamKind kind = params[i];
    auto wrong = [&](absl::StatusCode code, absl::string_view why) {
      return absl::Status(
          code, absl::StrCat("kernel ", name(), ": argument ", i, " is a ",
                             KindName(kind), " parameter; got ", Written(arg),
                             why.empty() ? "" : ": ", why));
    };
    const bool integer = arg.value_case() == v1::KernelArg::kI32 ||
                         arg.value_case() == v1::KernelArg::kU32 ||
                         arg.value_case() == v1::KernelArg::kI64 ||
                         arg.value_case() == v1::KernelArg::kU64;
    const bool real = arg.value_case() == v1::KernelArg::kF32 ||
                      arg.value_case() == v1::KernelArg::kF64;
    v1::KernelArg& to = out[i];
    switch (kind) {
      case v1::PARAM_KIND_I32:
      case v1::PARAM_KIND_U32:
      case v1::PARAM_KIND_I64:
      case v1::PARAM_KIND_U64: {
        if (!integer) {
          return wrong(absl::StatusCode::kInvalidArgument, "pass an integer");
        }
        const Integer v = IntegerOf(arg);
        constexpr uint64_t kI32Max = std::numeric_limits<int32_t>::max();
        constexpr uint64_t kI64Max = std::numeric_limits<int64_t>::max();
        constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();
        constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
        bool fits = false;
        const char* range = "";
        if (kind == v1::PARAM_KIND_I32) {
          fits = Fits(v, kI32Max + 1, kI32Max);
          range = "outside [-2^31, 2^31)";
          // |v| <= 2^31 here: negating it as an int64 is exact.
          if (fits) {
            const int64_t magnitude = static_cast<int64_t>(v.magnitude);
            to.set_i32(
                static_cast<int32_t>(v.negative ? -magnitude : magnitude));
          }
        } else if (kind == v1::PARAM_KIND_U32) {
          fits = Fits(v, 0, kU32Max);
          range = "outside [0, 2^32)";
          if (fits) to.set_u32(static_cast<uint32_t>(v.magnitude));
        } else if (kind == v1::PARAM_KIND_I64) {
          fits = Fits(v, kI64Max + 1, kI64Max);
          range = "outside [-2^63, 2^63)";
          // |v| <= 2^63 here; the one magnitude of 2^63 is INT64_MIN.
          if (fits) {
            to.set_i64(v.negative ? static_cast<int64_t>(-(v.magnitude - 1)) - 1
                                  : static_cast<int64_t>(v.magnitude));
          }
        } else {
          fits = Fits(v, 0, kU64Max);
          range = "outside [0, 2^64)";
          if (fits) to.set_u64(v.magnitude);
        }
        if (!fits) return wrong(absl::StatusCode::kOutOfRange, range);
        break;
      }
      case v1::PARAM_KIND_F32:
      case v1::PARAM_KIND_F64: {
        if (!integer && !real) {
          return wrong(absl::StatusCode::kInvalidArgument, "pass a number");
        }
        double v = 0;
        switch (arg.value_case()) {
          case v1::KernelArg::kI32:
            v = arg.i32();
            break;
          case v1::KernelArg::kU32:
            v = arg.u32();
            break;
          case v1::KernelArg::kI64:
            v = static_cast<double>(arg.i64());
            break;
          case v1::KernelArg::kU64:
            v = static_cast<double>(arg.u64());
            break;
          case v1::KernelArg::kF32:
            v = arg.f32();
            break;
          default:
            v = arg.f64();
            break;
        }
        if (kind == v1::PARAM_KIND_F64) {
          to.set_f64(v);
        } else if (std::isfinite(v) &&
                   std::abs(v) > std::numeric_limits<float>::max()) {
          return wrong(absl::StatusCode::kOutOfRange,
                       "outside the range of a 32-bit float");
        } else {
          to.set_f32(static_cast<float>(v));
        }
        break;
      }
      case v1::PARAM_KIND_BUFFER:
        if (arg.value_case() != v1::KernelArg::kBuffer) {
          return wrong(absl::StatusCode::kInvalidArgument, "pass a Buffer");
        }
        to = arg;
        break;
      case v1::PARAM_KIND_BYTES:
        if (arg.value_case() != v1::KernelArg::kBytes) {
          return wrong(absl::StatusCode::kInvalidArgument,
                       "pass Arg::Bytes(...)");
        }
        to = arg;
        break;
      default:
        // A kind this library does not know (a newer daemon): sent as
        // written, for the daemon to judge.
        to = arg;
        break;
    }
  }
  return out;
}

}  // namespace gpustream::client
