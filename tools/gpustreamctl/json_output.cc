// JSON rendering of daemon responses.
#include "tools/gpustreamctl/json_output.h"

#include <google/protobuf/util/json_util.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpustream::ctl {

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = false;
  options.always_print_primitive_fields = true;
  options.always_print_enums_as_ints = false;
  options.preserve_proto_field_names = false;
  std::string json;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    // Only a string field that is not UTF-8 can fail here.
    return absl::InternalError(absl::StrCat("cannot render ",
                                            message.GetTypeName(),
                                            " as JSON: ", status.ToString()));
  }
  return json;
}

std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20 || u == 0x7f) {
      out += absl::StrFormat("\\u%04x", u);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace gpustream::ctl
