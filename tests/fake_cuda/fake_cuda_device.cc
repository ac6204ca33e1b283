// libfakecuda's initialization and device attributes: cuInit reads the CUDA
// knobs and initializes the emulated GPU; cuDeviceGetAttribute describes an
// H100-class device with the emulation's limits.
#include <atomic>
#include <cstdint>
#include <mutex>

#include "tests/fake_cuda/fake_api.h"
#include "tests/fake_cuda/fake_cuda_skin.h"
#include "tests/fake_gpu/fake_context.h"

namespace fakecuda {
namespace {

using fakegpu::kDeviceLimits;
using fakegpu::ParseEnv;

// Serializes cuInit's reading of the CUDA knobs with the emulation's init.
std::mutex g_init_mu;
// The compute capability, stored before the emulation publishes its
// configuration: whoever sees an initialized device sees it.
std::atomic<int> g_compute_capability{90};

// The emulation is CUDA's from the moment the library is loaded: its
// messages name libfakecuda, before cuInit too.
[[maybe_unused]] const bool g_skinned = [] {
  fakegpu::Skin skin;
  skin.library = "libfakecuda";
  skin.connections_env = "CUDA_DEVICE_MAX_CONNECTIONS";
  skin.default_connections = 8;
  fakegpu::SetSkin(skin);
  return true;
}();

}  // namespace

int DriverVersion() {
  uint64_t version = CUDA_VERSION;
  // A malformed value is reported by cuInit; here it reads as the default.
  if (!ParseEnv("FAKECUDA_DRIVER_VERSION", 1000, 99000, &version)) {
    return CUDA_VERSION;
  }
  return static_cast<int>(version);
}

int ComputeCapability() {
  return g_compute_capability.load(std::memory_order_acquire);
}

// Checks FAKECUDA_DRIVER_VERSION and reads FAKECUDA_COMPUTE_CAPABILITY (major
// * 10 + minor, 30..129), then initializes the emulation as CUDA's, with
// CUDA_DEVICE_MAX_CONNECTIONS hardware queues (default 8). The emulation
// reads its knobs once; so is the compute capability.
CUresult Fake_cuInit(unsigned int flags) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (fakegpu::GetConfig() == nullptr) {  // Read once, as the emulation does.
    uint64_t version = 0;
    uint64_t compute_capability = 90;
    if (!ParseEnv("FAKECUDA_DRIVER_VERSION", 1000, 99000, &version) ||
        !ParseEnv("FAKECUDA_COMPUTE_CAPABILITY", 30, 129,
                  &compute_capability)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    g_compute_capability.store(static_cast<int>(compute_capability),
                               std::memory_order_release);
  }
  return ToCu(fakegpu::Init(flags));
}

CUresult Fake_cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = DriverVersion();
  return CUDA_SUCCESS;
}

// Attributes not listed are 0 (features the fake does not have).
CUresult Fake_cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib,
                                   CUdevice dev) {
  bool wait_value = false;
  if (CUresult r = ToCu(fakegpu::DeviceCanWaitValue(dev, &wait_value));
      r != CUDA_SUCCESS) {
    return r;
  }
  if (pi == nullptr || attrib < 1 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = kDeviceLimits.max_threads_per_block;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *pi = kDeviceLimits
                .max_block_dim[attrib - CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X];
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *pi = kDeviceLimits
                .max_grid_dim[attrib - CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X];
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *pi = kDeviceLimits.shared_per_block;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *pi = kDeviceLimits.shared_per_block_optin;
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
      *pi = kDeviceLimits.multiprocessors;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *pi = 2048;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *pi = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *pi = ComputeCapability() / 10;
      break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:  // From compute capability 9.0.
      *pi = ComputeCapability() >= 90 ? 1 : 0;
      break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
      *pi = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *pi = ComputeCapability() % 10;
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
      *pi = wait_value ? 1 : 0;
      break;
    default:
      *pi = 0;
      break;
  }
  return CUDA_SUCCESS;
}

}  // namespace fakecuda
