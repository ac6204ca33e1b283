// Runs every conformance case (*_cases.cc) once per backend under test.
#include "tests/conformance/device_conformance.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/conformance/backend_under_test.h"

namespace gpustream::backend {

INSTANTIATE_TEST_SUITE_P(
    Backends, DeviceConformanceTest,
    ::testing::ValuesIn(conformance::BackendsAndSharingModesUnderTest()),
    [](const auto& info) { return info.param; });

}  // namespace gpustream::backend
