// A typed kernel launch argument.
#ifndef GPUSTREAM_CLIENT_KERNEL_ARG_H_
#define GPUSTREAM_CLIENT_KERNEL_ARG_H_

#include <cstdint>
#include <string>
#include <type_traits>

#include "client/buffer.h"
#include "proto/gpustream/v1/gpustream.pb.h"

namespace gpustream::client {

// A launch argument as written: any integer (7, 7u, 4ull, 4LL, a size_t),
// float or double, a Buffer (with an offset), or Arg::Bytes. At the launch
// the client converts each to the kernel's declared parameter kind (from
// the signatures it fetched with ListModules): an integer to any integer
// kind it fits (a negative value never fits an unsigned kind) or to F32 /
// F64, a float or double to F32 / F64 (in range), a buffer only to BUFFER,
// bytes only to BYTES. Anything else is refused at the call (nothing is
// sent; see Queue::launch).
class Arg {
 public:
  Arg(const Buffer& buffer, uint64_t offset = 0) : buffer_(&buffer) {
    proto_.mutable_buffer()->set_buffer_id(buffer.id());
    proto_.mutable_buffer()->set_offset(offset);
  }
  // Integers keep their signedness and width until converted (int32_t is
  // I32, uint64_t is U64... as sent to a kernel the client has no
  // signature for); bool is not an integer argument.
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>,
                             int> = 0>
  Arg(T v) {
    static_assert(sizeof(T) <= 8, "integers of at most 64 bits");
    if constexpr (std::is_signed_v<T> && sizeof(T) <= 4) {
      proto_.set_i32(static_cast<int32_t>(v));
    } else if constexpr (std::is_signed_v<T>) {
      proto_.set_i64(static_cast<int64_t>(v));
    } else if constexpr (sizeof(T) <= 4) {
      proto_.set_u32(static_cast<uint32_t>(v));
    } else {
      proto_.set_u64(static_cast<uint64_t>(v));
    }
  }
  Arg(bool) = delete;
  Arg(float v) { proto_.set_f32(v); }
  Arg(double v) { proto_.set_f64(v); }
  // An opaque blob passed by value (a BYTES parameter).
  static Arg Bytes(std::string bytes) {
    Arg arg(0);
    arg.proto_.set_bytes(std::move(bytes));
    return arg;
  }

  // As written; Queue::launch sends the converted form.
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

// How a launch runs, beyond its grid and block (as Mojo's enqueue_function:
// cluster_dim, shared_mem_bytes, launch attributes). Members in this order,
// so designated initializers read {.cluster = {2}, .cooperative = true,
// .shared_memory_bytes = 64 << 10}.
struct LaunchOptions {
  // Thread block clusters: all zero (the default) = none; {2} is a cluster
  // of 2 blocks along x. Every grid dimension must be a multiple of the
  // cluster's (INVALID_ARGUMENT) and its volume at most the device's
  // max_cluster_size and the kernel's limit (OUT_OF_RANGE); UNIMPLEMENTED
  // on a device without clusters.
  Dim3 cluster{0, 0, 0};
  // Every block co-resident, so blocks may synchronize grid-wide; a grid
  // larger than the device holds resident is OUT_OF_RANGE.
  bool cooperative = false;
  // Dynamic shared memory per block, up to the kernel's opt-in limit.
  uint32_t shared_memory_bytes = 0;
};

}  // namespace gpustream::client

#endif  // GPUSTREAM_CLIENT_KERNEL_ARG_H_
