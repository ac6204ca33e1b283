// What libfakecuda adds to the emulated GPU (//tests/fake_gpu) to serve it
// as CUDA's driver: the translation of results and handles, and the CUDA
// knobs (FAKECUDA_DRIVER_VERSION, FAKECUDA_COMPUTE_CAPABILITY).
#ifndef TESTS_FAKE_CUDA_FAKE_CUDA_SKIN_H_
#define TESTS_FAKE_CUDA_FAKE_CUDA_SKIN_H_

#include <cuda.h>

#include <cstdint>

#include "tests/fake_gpu/fake_gpu.h"

namespace fakecuda {

// The driver version cuDriverGetVersion reports and cuGetProcAddress
// checks requests against (FAKECUDA_DRIVER_VERSION, default 13000). Read
// from the environment on each call: both work before cuInit.
int DriverVersion();

// The devices' compute capability as major * 10 + minor
// (FAKECUDA_COMPUTE_CAPABILITY, default 90: an H100/H200), as the first
// successful cuInit read it. A module image loads only with code for it
// (fake_cuda_image.cc).
int ComputeCapability();

// The CUresult of each emulation result.
CUresult ToCu(fakegpu::Result result);

// cuModuleLoadData's check of the image (fake_cuda_image.cc): its size, or
// 0 with *error set when the device cannot run it.
uint64_t CheckImage(const void* image, CUresult* error);

using fakegpu::HandleCast;

}  // namespace fakecuda

#endif  // TESTS_FAKE_CUDA_FAKE_CUDA_SKIN_H_
