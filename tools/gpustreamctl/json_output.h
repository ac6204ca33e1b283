// gpustreamctl's --json output: protobuf's canonical JSON mapping, so the
// field names are the proto fields' lowerCamel JSON names, exactly as in
// every other proto3 JSON tool.
#ifndef GPUSTREAM_TOOLS_GPUSTREAMCTL_JSON_OUTPUT_H_
#define GPUSTREAM_TOOLS_GPUSTREAMCTL_JSON_OUTPUT_H_

#include <google/protobuf/message.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpustream::ctl {

// `message` as one line of JSON (no trailing newline): lowerCamel field
// names, every field present even when zero or empty (a script never meets
// a missing key), enums by name, 64-bit integers as decimal strings (the
// proto3 JSON rule, since JSON numbers lose precision past 2^53).
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message);

// `text` as a JSON string literal, quotes included. Contract: `text` is
// UTF-8; control characters, quotes and backslashes are escaped.
std::string JsonQuote(absl::string_view text);

}  // namespace gpustream::ctl

#endif  // GPUSTREAM_TOOLS_GPUSTREAMCTL_JSON_OUTPUT_H_
