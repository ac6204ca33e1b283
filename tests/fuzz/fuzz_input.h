// FuzzInput: reads typed values off a fuzzer's bytes, front to back.
//
// The same idea as LLVM's FuzzedDataProvider, kept here because that header
// ships with clang only, and the fuzz targets also build with g++ (their
// corpus tests run in every configuration). Every read succeeds: once the
// bytes run out, integers read as the low end of their range, booleans as
// false and strings as empty, so any byte string decodes to something.
// Not thread-safe; does not own the bytes, which must outlive it.
#ifndef GPUSTREAM_TESTS_FUZZ_FUZZ_INPUT_H_
#define GPUSTREAM_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace gpustream::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_; }

  // A value in [min, max], reading only as many bytes as the range needs.
  template <typename T>
  T Range(T min, T max) {
    static_assert(std::is_integral_v<T>);
    using U = std::make_unsigned_t<T>;
    const uint64_t span =
        static_cast<uint64_t>(static_cast<U>(max) - static_cast<U>(min));
    uint64_t raw = 0;
    for (uint64_t left = span; left != 0 && size_ != 0; left >>= 8) {
      raw = (raw << 8) | *data_++;
      --size_;
    }
    if (span != std::numeric_limits<uint64_t>::max()) raw %= span + 1;
    return static_cast<T>(static_cast<U>(min) + static_cast<U>(raw));
  }

  // Any value of T.
  template <typename T>
  T Any() {
    if constexpr (std::is_floating_point_v<T>) {
      using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
      const Bits bits = Any<Bits>();
      T value;
      std::memcpy(&value, &bits, sizeof(value));
      return value;
    } else {
      return Range(std::numeric_limits<T>::min(),
                   std::numeric_limits<T>::max());
    }
  }

  bool Bool() { return (Range<uint8_t>(0, 255) & 1) != 0; }

  // True about once in `n` reads (n > 0).
  bool OneIn(uint32_t n) { return Range<uint32_t>(0, n - 1) == 0; }

  // Up to `max_size` bytes: a length, then that many bytes (fewer if the
  // input ends first).
  std::string Bytes(size_t max_size) {
    size_t n = Range<size_t>(0, max_size);
    if (n > size_) n = size_;
    std::string out(reinterpret_cast<const char*>(data_), n);
    data_ += n;
    size_ -= n;
    return out;
  }

  // One of `values` (not empty).
  template <typename T>
  const T& Pick(const std::vector<T>& values) {
    return values[Range<size_t>(0, values.size() - 1)];
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace gpustream::fuzz

#endif  // GPUSTREAM_TESTS_FUZZ_FUZZ_INPUT_H_
