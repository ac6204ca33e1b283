// Routes what gRPC and protobuf would print on stderr themselves into the
// daemon's structured log, so every line on stderr is one event in the
// chosen format and under --log_level. Their messages are mostly about
// what callers sent (a failed TLS handshake, a string field that is not
// UTF-8), so they go out at debug level, gRPC's errors at warning; their
// text goes through log::Redact like a caller's status.
//
// Call once, after log::Init and before the server starts.
#ifndef GPUSTREAM_SERVER_LOG_LIBRARY_LOGS_H_
#define GPUSTREAM_SERVER_LOG_LIBRARY_LOGS_H_

namespace gpustream::log {

void CaptureLibraryLogs();

}  // namespace gpustream::log

#endif  // GPUSTREAM_SERVER_LOG_LIBRARY_LOGS_H_
