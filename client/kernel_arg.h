// A typed kernel launch argument.
#ifndef GPUSTREAM_CLIENT_KERNEL_ARG_H_
#define GPUSTREAM_CLIENT_KERNEL_ARG_H_

#include <cstdint>
#include <string>

#include "client/buffer.h"
#include "proto/gpustream/v1/gpustream.pb.h"

namespace gpustream::client {

// The C++ type picks the parameter kind: int32_t → I32, uint32_t → U32,
// int64_t → I64, uint64_t → U64, float → F32, double → F64, a Buffer →
// BUFFER. The server checks kinds against the kernel's declaration, so
// write 7u or uint64_t{n} where the kernel wants unsigned values.
class Arg {
 public:
  Arg(const Buffer& buffer, uint64_t offset = 0) : buffer_(&buffer) {
    proto_.mutable_buffer()->set_buffer_id(buffer.id());
    proto_.mutable_buffer()->set_offset(offset);
  }
  Arg(int32_t v) { proto_.set_i32(v); }
  Arg(uint32_t v) { proto_.set_u32(v); }
  Arg(int64_t v) { proto_.set_i64(v); }
  Arg(uint64_t v) { proto_.set_u64(v); }
  Arg(float v) { proto_.set_f32(v); }
  Arg(double v) { proto_.set_f64(v); }
  // An opaque blob passed by value (a BYTES parameter).
  static Arg Bytes(std::string bytes) {
    Arg arg(int32_t{0});
    arg.proto_.set_bytes(std::move(bytes));
    return arg;
  }

  const v1::KernelArg& proto() const { return proto_; }
  // The buffer of a BUFFER argument (null for values). Args live only for
  // the launch call that takes them, as the buffer does.
  const Buffer* buffer() const { return buffer_; }

 private:
  v1::KernelArg proto_;
  const Buffer* buffer_ = nullptr;
};

// Grid or block dimensions.
struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_KERNEL_ARG_H_
