// Names of the neutral value types.
#include "server/backend/types.h"

namespace gpustream::backend {

const char* ParamKindName(ParamKind kind) {
  switch (kind) {
    case ParamKind::kBuffer:
      return "BUFFER";
    case ParamKind::kI32:
      return "I32";
    case ParamKind::kU32:
      return "U32";
    case ParamKind::kI64:
      return "I64";
    case ParamKind::kU64:
      return "U64";
    case ParamKind::kF32:
      return "F32";
    case ParamKind::kF64:
      return "F64";
    case ParamKind::kBytes:
      return "BYTES";
  }
  return "UNKNOWN";
}

uint32_t ParamKindSize(ParamKind kind) {
  switch (kind) {
    case ParamKind::kI32:
    case ParamKind::kU32:
    case ParamKind::kF32:
      return 4;
    case ParamKind::kBuffer:
    case ParamKind::kI64:
    case ParamKind::kU64:
    case ParamKind::kF64:
      return 8;
    case ParamKind::kBytes:
      break;
  }
  return 0;
}

}  // namespace gpustream::backend
