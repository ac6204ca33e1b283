// Initialization and device queries of the fake CUDA driver: cuInit reads
// the environment once, and every device looks like an H100-class GPU
// (compute capability 9.0, 132 SMs) with FAKECUDA_MEMORY_BYTES of memory.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tests/fake_cuda/fake_api.h"
#include "tests/fake_cuda/fake_context.h"

namespace fakecuda {
namespace {

// Published once by the first successful cuInit, never freed.
std::atomic<const Config*> g_config{nullptr};
std::mutex g_init_mu;
thread_local bool t_in_host_function = false;

// Parses the decimal environment variable `name` into *out (left alone if
// unset); false, after saying why on stderr, if it is not in [min, max].
bool ParseEnv(const char* name, uint64_t min, uint64_t max, uint64_t* out) {
  const char* text = std::getenv(name);
  if (text == nullptr) return true;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' ||
      value < min || value > max) {
    std::fprintf(stderr,
                 "libfakecuda: %s=\"%s\" is not a number in [%llu, %llu]\n",
                 name, text, static_cast<unsigned long long>(min),
                 static_cast<unsigned long long>(max));
    return false;
  }
  *out = value;
  return true;
}

// CUDA_DEVICE_MAX_CONNECTIONS as the driver reads it at cuInit: a number in
// [1, 32]; above 32 is 32; anything else (unset, malformed, below 1) is the
// default 8.
int MaxConnections() {
  const int kDefault = GetSkin().default_connections;
  const char* text = std::getenv(GetSkin().connections_env);
  if (text == nullptr) return kDefault;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1) return kDefault;
  return static_cast<int>(value > 32 ? 32 : value);
}

}  // namespace

const Config* GetConfig() { return g_config.load(std::memory_order_acquire); }

namespace {
Skin g_skin;
}  // namespace

void SetSkin(const Skin& skin) { g_skin = skin; }
const Skin& GetSkin() { return g_skin; }

void SetInHostFunction(bool in_host_function) {
  t_in_host_function = in_host_function;
}

bool InHostFunction() { return t_in_host_function; }

void Misuse(const char* what) {
  std::fprintf(stderr, "libfakecuda: driver misuse: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

int DriverVersion() {
  uint64_t version = CUDA_VERSION;
  // A malformed value is reported by cuInit; here it reads as the default.
  if (!ParseEnv("FAKECUDA_DRIVER_VERSION", 1000, 99000, &version)) {
    return CUDA_VERSION;
  }
  return static_cast<int>(version);
}

CUresult CheckInit() {
  if (t_in_host_function) {
    Misuse(
        "a CUDA call from inside a host function (cuLaunchHostFunc): a real "
        "driver may deadlock");
  }
  return GetConfig() != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult CheckDevice(CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  return dev >= 0 && dev < GetConfig()->devices ? CUDA_SUCCESS
                                                : CUDA_ERROR_INVALID_DEVICE;
}

// Reads FAKECUDA_DEVICES (0..64, default 1), FAKECUDA_MEMORY_BYTES (bytes
// per device, default 1 GiB), FAKECUDA_NO_WAIT_VALUE (0 or 1),
// FAKECUDA_COMPUTE_CAPABILITY (major * 10 + minor, default 90), the hazard
// knobs (Config) and CUDA_DEVICE_MAX_CONNECTIONS. With zero devices it
// fails (CUDA_ERROR_NO_DEVICE) and reads them again next time.
CUresult Fake_cuInit(unsigned int flags) {
  if (t_in_host_function) {
    Misuse("cuInit from inside a host function (cuLaunchHostFunc)");
  }
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (GetConfig() != nullptr) return CUDA_SUCCESS;
  Config config;
  uint64_t devices = config.devices;
  uint64_t no_wait_value = 0;
  uint64_t shared_connections = 1;
  uint64_t sync_free = 1;
  uint64_t reset_clears_sticky = 0;
  uint64_t version = 0;
  uint64_t compute_capability = config.compute_capability;
  if (!ParseEnv("FAKECUDA_PAGE_BYTES", 0, uint64_t{1} << 30,
                &config.page_bytes) ||
      (config.page_bytes != 0 &&
       (config.page_bytes < 4096 ||
        (config.page_bytes & (config.page_bytes - 1)) != 0))) {
    std::fprintf(stderr,
                 "libfakecuda: FAKECUDA_PAGE_BYTES must be 0 or a power of "
                 "two of at least 4096\n");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!ParseEnv("FAKECUDA_DEVICES", 0, 64, &devices) ||
      !ParseEnv("FAKECUDA_MEMORY_BYTES", 1, uint64_t{1} << 50,
                &config.memory_bytes) ||
      !ParseEnv("FAKECUDA_NO_WAIT_VALUE", 0, 1, &no_wait_value) ||
      !ParseEnv("FAKECUDA_SHARED_CONNECTIONS", 0, 1, &shared_connections) ||
      !ParseEnv("FAKECUDA_SYNC_FREE", 0, 1, &sync_free) ||
      !ParseEnv("FAKECUDA_RESET_CLEARS_STICKY", 0, 1, &reset_clears_sticky) ||
      !ParseEnv("FAKECUDA_DRIVER_VERSION", 1000, 99000, &version) ||
      !ParseEnv("FAKECUDA_COMPUTE_CAPABILITY", 30, 129, &compute_capability)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (devices == 0) return CUDA_ERROR_NO_DEVICE;
  config.devices = static_cast<int>(devices);
  config.wait_value = no_wait_value == 0;
  config.connections = shared_connections != 0 ? MaxConnections() : 0;
  config.sync_free = sync_free != 0;
  config.reset_clears_sticky = reset_clears_sticky != 0;
  config.compute_capability = static_cast<int>(compute_capability);
  g_config.store(new Config(config), std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult Fake_cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = DriverVersion();
  return CUDA_SUCCESS;
}

CUresult Fake_cuDeviceGetCount(int* count) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = GetConfig()->devices;
  return CUDA_SUCCESS;
}

CUresult Fake_cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = CheckDevice(ordinal); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult Fake_cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "Fake CUDA Device %d", dev);
  return CUDA_SUCCESS;
}

CUresult Fake_cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = GetConfig()->memory_bytes;
  return CUDA_SUCCESS;
}

// Attributes not listed are 0 (features the fake does not have).
CUresult Fake_cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib,
                                   CUdevice dev) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (pi == nullptr || attrib < 1 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int wait_value = GetConfig()->wait_value ? 1 : 0;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *pi = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *pi = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *pi = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *pi = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *pi = 49152;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *pi = 232448;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *pi = 233472;
      break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      *pi = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *pi = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      *pi = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *pi = 1980000;  // kHz
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *pi = 2619000;  // kHz
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *pi = 5120;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *pi = 50 << 20;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *pi = 132;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *pi = 2048;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *pi = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *pi = GetConfig()->compute_capability / 10;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *pi = GetConfig()->compute_capability % 10;
      break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      *pi = 2;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *pi = 0x18 + dev;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      *pi = 512;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *pi = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
      *pi = wait_value;
      break;
    default:
      *pi = 0;
      break;
  }
  return CUDA_SUCCESS;
}

}  // namespace fakecuda
