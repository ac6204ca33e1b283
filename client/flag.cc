// Flag operations.
#include "client/flag.h"

#include "client/wire.h"

namespace gpustream::client {

absl::Status Flag::signal(uint64_t value) {
  core().Enqueue([&](v1::Command& c) {
    auto* signal = c.mutable_signal_flag();
    signal->set_flag_id(id());
    signal->set_value(value);
  });
  return core().Flush();
}

absl::StatusOr<uint64_t> Flag::load() {
  auto result = core().Call(
      [&](v1::Command& c) { c.mutable_read_flag()->set_flag_id(id()); });
  if (!result.ok()) return result.status();
  return result->read_flag().value();
}

absl::StatusOr<uint64_t> Flag::wait(uint64_t value, WaitCondition condition,
                                    absl::Duration timeout) {
  auto result = core().Call(
      [&](v1::Command& c) {
        auto* wait = c.mutable_wait_flag();
        wait->set_flag_id(id());
        wait->set_value(value);
        wait->set_condition(ToProto(condition));
        wait->set_timeout_ms(TimeoutMs(timeout));
      },
      SessionCore::Answer::kResult, ClientWait(timeout));
  if (!result.ok()) return result.status();
  return result->wait_flag().value();
}

}  // namespace gpustream::client
