// Initialization and device queries of the emulated GPU: Init reads the
// environment once, and every device has kDeviceLimits (an H100-class GPU)
// and FAKEGPU_MEMORY_BYTES of memory.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tests/fake_gpu/fake_context.h"
#include "tests/fake_gpu/fake_gpu.h"

namespace fakegpu {
namespace {

// Published once by the first successful Init, never freed.
std::atomic<const Config*> g_config{nullptr};
std::mutex g_init_mu;
struct HostFunctionMark {
  bool in = false;
};
bool& InHostFunctionMark() { return PerThread<HostFunctionMark>().in; }

// The skin's hardware-queue variable (CUDA_DEVICE_MAX_CONNECTIONS,
// GPU_MAX_HW_QUEUES) as the driver reads it at init: a number in [1, 32];
// above 32 is 32; anything else (unset, malformed, below 1) is the skin's
// default.
int MaxConnections() {
  const int kDefault = GetSkin().default_connections;
  const char* env = GetSkin().connections_env;
  const char* text = env != nullptr ? std::getenv(env) : nullptr;
  if (text == nullptr) return kDefault;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1) return kDefault;
  return static_cast<int>(value > 32 ? 32 : value);
}

}  // namespace

bool ParseEnv(const char* name, uint64_t min, uint64_t max, uint64_t* out) {
  const char* text = std::getenv(name);
  if (text == nullptr) return true;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' ||
      value < min || value > max) {
    std::fprintf(stderr, "%s: %s=\"%s\" is not a number in [%llu, %llu]\n",
                 GetSkin().library, name, text,
                 static_cast<unsigned long long>(min),
                 static_cast<unsigned long long>(max));
    return false;
  }
  *out = value;
  return true;
}

const char* ResultName(Result result) {
  switch (result) {
#define FAKEGPU_RESULT_NAME(r) \
  case Result::r:              \
    return #r;
    FAKEGPU_RESULT_NAME(kSuccess)
    FAKEGPU_RESULT_NAME(kInvalidValue)
    FAKEGPU_RESULT_NAME(kOutOfMemory)
    FAKEGPU_RESULT_NAME(kNotInitialized)
    FAKEGPU_RESULT_NAME(kNoDevice)
    FAKEGPU_RESULT_NAME(kInvalidDevice)
    FAKEGPU_RESULT_NAME(kInvalidImage)
    FAKEGPU_RESULT_NAME(kInvalidContext)
    FAKEGPU_RESULT_NAME(kInvalidHandle)
    FAKEGPU_RESULT_NAME(kNotFound)
    FAKEGPU_RESULT_NAME(kNotReady)
    FAKEGPU_RESULT_NAME(kNotSupported)
    FAKEGPU_RESULT_NAME(kContextIsDestroyed)
    FAKEGPU_RESULT_NAME(kLaunchOutOfResources)
    FAKEGPU_RESULT_NAME(kCooperativeLaunchTooLarge)
    FAKEGPU_RESULT_NAME(kInvalidClusterSize)
    FAKEGPU_RESULT_NAME(kInvalidResourceConfiguration)
    FAKEGPU_RESULT_NAME(kStreamCaptureUnsupported)
    FAKEGPU_RESULT_NAME(kStreamCaptureInvalidated)
    FAKEGPU_RESULT_NAME(kStreamCaptureWrongThread)
    FAKEGPU_RESULT_NAME(kIllegalState)
    FAKEGPU_RESULT_NAME(kHostMemoryAlreadyRegistered)
    FAKEGPU_RESULT_NAME(kHostMemoryNotRegistered)
    FAKEGPU_RESULT_NAME(kIllegalAddress)
    FAKEGPU_RESULT_NAME(kMisalignedAddress)
    FAKEGPU_RESULT_NAME(kLaunchFailed)
#undef FAKEGPU_RESULT_NAME
  }
  return "an unknown result";
}

const Config* GetConfig() { return g_config.load(std::memory_order_acquire); }

namespace {
Skin g_skin;
}  // namespace

void SetSkin(const Skin& skin) { g_skin = skin; }
const Skin& GetSkin() { return g_skin; }

void SetInHostFunction(bool in_host_function) {
  InHostFunctionMark() = in_host_function;
}

bool InHostFunction() { return InHostFunctionMark(); }

void Misuse(const char* what) {
  std::fprintf(stderr, "%s: driver misuse: %s\n", GetSkin().library, what);
  std::fflush(stderr);
  std::abort();
}

Result CheckInit() {
  if (InHostFunctionMark()) {
    Misuse(
        "a driver call from inside a host function (LaunchHostFunc): a real "
        "driver may deadlock");
  }
  return GetConfig() != nullptr ? Result::kSuccess : Result::kNotInitialized;
}

Result CheckDevice(int dev) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  return dev >= 0 && dev < GetConfig()->devices ? Result::kSuccess
                                                : Result::kInvalidDevice;
}

// Reads FAKEGPU_DEVICES (0..64, default 1), FAKEGPU_MEMORY_BYTES (bytes
// per device, default 1 GiB), FAKEGPU_NO_WAIT_VALUE (0 or 1), the hazard
// knobs (Config) and the skin's hardware-queue variable. With zero devices
// it fails (Result::kNoDevice) and reads them again next time.
Result Init(unsigned int flags) {
  if (InHostFunctionMark()) {
    Misuse("Init from inside a host function (LaunchHostFunc)");
  }
  if (flags != 0) return Result::kInvalidValue;
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (GetConfig() != nullptr) return Result::kSuccess;
  Config config;
  uint64_t devices = config.devices;
  uint64_t no_wait_value = 0;
  uint64_t shared_connections = 1;
  uint64_t sync_free = 1;
  uint64_t reset_clears_sticky = 0;
  if (!ParseEnv("FAKEGPU_PAGE_BYTES", 0, uint64_t{1} << 30,
                &config.page_bytes) ||
      (config.page_bytes != 0 &&
       (config.page_bytes < 4096 ||
        (config.page_bytes & (config.page_bytes - 1)) != 0))) {
    std::fprintf(stderr,
                 "%s: FAKEGPU_PAGE_BYTES must be 0 or a power of two of at "
                 "least 4096\n",
                 GetSkin().library);
    return Result::kInvalidValue;
  }
  if (!ParseEnv("FAKEGPU_DEVICES", 0, 64, &devices) ||
      !ParseEnv("FAKEGPU_MEMORY_BYTES", 1, uint64_t{1} << 50,
                &config.memory_bytes) ||
      !ParseEnv("FAKEGPU_NO_WAIT_VALUE", 0, 1, &no_wait_value) ||
      !ParseEnv("FAKEGPU_SHARED_CONNECTIONS", 0, 1, &shared_connections) ||
      !ParseEnv("FAKEGPU_SYNC_FREE", 0, 1, &sync_free) ||
      !ParseEnv("FAKEGPU_RESET_CLEARS_STICKY", 0, 1, &reset_clears_sticky)) {
    return Result::kInvalidValue;
  }
  if (devices == 0) return Result::kNoDevice;
  config.devices = static_cast<int>(devices);
  config.wait_value = no_wait_value == 0;
  config.connections = shared_connections != 0 ? MaxConnections() : 0;
  config.sync_free = sync_free != 0;
  config.reset_clears_sticky = reset_clears_sticky != 0;
  g_config.store(new Config(config), std::memory_order_release);
  return Result::kSuccess;
}

Result DeviceGetCount(int* count) {
  if (Result r = CheckInit(); r != Result::kSuccess) return r;
  if (count == nullptr) return Result::kInvalidValue;
  *count = GetConfig()->devices;
  return Result::kSuccess;
}

Result DeviceGet(int* device, int ordinal) {
  if (Result r = CheckDevice(ordinal); r != Result::kSuccess) return r;
  if (device == nullptr) return Result::kInvalidValue;
  *device = ordinal;
  return Result::kSuccess;
}

Result DeviceGetName(char* name, int len, int dev) {
  if (Result r = CheckDevice(dev); r != Result::kSuccess) return r;
  if (name == nullptr || len <= 0) return Result::kInvalidValue;
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU %d", dev);
  return Result::kSuccess;
}

Result DeviceTotalMem(size_t* bytes, int dev) {
  if (Result r = CheckDevice(dev); r != Result::kSuccess) return r;
  if (bytes == nullptr) return Result::kInvalidValue;
  *bytes = GetConfig()->memory_bytes;
  return Result::kSuccess;
}

Result DeviceCanWaitValue(int dev, bool* supported) {
  if (Result r = CheckDevice(dev); r != Result::kSuccess) return r;
  if (supported == nullptr) return Result::kInvalidValue;
  *supported = GetConfig()->wait_value;
  return Result::kSuccess;
}

}  // namespace fakegpu
