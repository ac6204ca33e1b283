#include "server/log/library_logs.h"

#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>

#include <string>

#include "server/log/log.h"

namespace gpustream::log {
namespace {

void FromProtobuf(google::protobuf::LogLevel level, const char* file, int line,
                  const std::string& message) {
  const Level ours =
      level >= google::protobuf::LOGLEVEL_FATAL ? Level::kError : Level::kDebug;
  if (!Enabled(ours)) return;
  Event(ours, "protobuf")
      .Str("source", file != nullptr ? file : "")
      .Num("line", line)
      .Str("message", Redact(message));
}

void FromGrpc(gpr_log_func_args* args) {
  const Level ours = args->severity == GPR_LOG_SEVERITY_ERROR ? Level::kWarning
                                                              : Level::kDebug;
  if (!Enabled(ours)) return;
  Event(ours, "grpc")
      .Str("source", args->file != nullptr ? args->file : "")
      .Num("line", args->line)
      .Str("message", Redact(args->message != nullptr ? args->message : ""));
}

}  // namespace

void CaptureLibraryLogs() {
  google::protobuf::SetLogHandler(&FromProtobuf);
  gpr_set_log_function(&FromGrpc);
  // gRPC formats only what passes its own verbosity: its INFO and DEBUG
  // map to our debug, so below debug only its errors are worth formatting.
  gpr_set_log_verbosity(Enabled(Level::kDebug) ? GPR_LOG_SEVERITY_DEBUG
                                               : GPR_LOG_SEVERITY_ERROR);
}

}  // namespace gpustream::log
