// Decodes a fuzzer's bytes into a session's Submit commands, structure-aware.
#ifndef GPUSTREAM_TESTS_FUZZ_COMMAND_DECODER_H_
#define GPUSTREAM_TESTS_FUZZ_COMMAND_DECODER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "proto/gpustream/v1/gpustream.pb.h"
#include "tests/fuzz/fuzz_input.h"

namespace gpustream::fuzz {

// Turns bytes into a sequence of v1::Commands that mostly make sense: ids
// are mostly those of objects created earlier in the same input (learnt
// through Observe, so server-minted ids count too), sizes and offsets lie
// near the real buffer sizes, kernel arguments mostly match the samples
// module's signatures; sometimes any value, so that every validation path is
// reached. Every wait carries a timeout of 1 to 3 ms (0 would mean none), and
// no command makes the device work long (kernel grids are small or beyond
// the device's limits, spin_ns spins at most 200 us), so an input runs in
// milliseconds. Not thread-safe.
class CommandDecoder {
 public:
  // The most commands one input decodes to.
  static constexpr int kMaxCommands = 64;

  // `default_queue` is the session's default queue. Does not own `data`.
  CommandDecoder(const uint8_t* data, size_t size, uint64_t default_queue);

  // Whether another command can be decoded.
  bool HasNext() const;
  v1::Command Next();
  // What `command` did: learns the ids it created or destroyed.
  void Observe(const v1::Command& command, const v1::CommandResult& result,
               const absl::Status& status);

 private:
  struct BufferInfo {
    uint64_t id;
    uint64_t size;
  };

  uint64_t AnyId();
  // An id of `known` mostly, else of another kind or any id.
  uint64_t PickId(const std::vector<uint64_t>& known);
  uint64_t PickQueue() { return PickId(queues_); }
  // A buffer id and its size (0 if unknown).
  BufferInfo PickBuffer();
  // The id field of a create: 0 (the server picks), a small client id
  // (maybe taken already), or any id.
  uint64_t NewId();
  // A value near `limit`: mostly within [0, limit], else just past it or
  // any value.
  uint64_t Near(uint64_t limit);
  uint32_t Timeout() { return in_.Range<uint32_t>(1, 3); }
  // An enum's value: mostly one it defines (0..max), sometimes not.
  int EnumValue(int max);
  void Forget(std::vector<uint64_t>& ids, uint64_t id);

  void Launch(v1::LaunchKernelRequest& req);
  void KernelArgs(const std::string& kernel, v1::LaunchKernelRequest& req);
  void SetDim(v1::Dim3* dim, uint32_t limit_x);

  FuzzInput in_;
  int decoded_ = 0;
  std::vector<uint64_t> queues_, events_, flags_;
  std::vector<BufferInfo> buffers_;
};

}  // namespace gpustream::fuzz

#endif  // GPUSTREAM_TESTS_FUZZ_COMMAND_DECODER_H_
