#!/usr/bin/env bash
# Builds and runs the CUDA benchmark (bench/gpu_bench.cc): the daemon's CUDA
# backend against the CUDA driver used directly, side by side. Without
# --cuda_driver it runs on the fake driver that Bazel builds
# (tests/fake_cuda, CPU emulation: the figures then say nothing about a GPU),
# so that it runs anywhere; on a GPU machine pass --cuda_driver=libcuda.so.1.
# Other flags go to gpu_bench (--launches, --round_trips).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
# gpu_bench and the fake exist only where Bazel found a CUDA toolkit.
if ! bazel query //bench:gpu_bench >/dev/null 2>&1; then
  echo "gpu-bench: this build has no CUDA support (no CUDA toolkit at" \
    "\${GPUSTREAM_CUDA_PATH:-/usr/local/cuda}): skipped"
  exit 0
fi
bazel build -c opt //bench:gpu_bench //tests/fake_cuda:libfakecuda.so

# bazel-out/k8-opt, not bazel-bin: bazel-bin follows whichever build ran last
# (an ASan build of someone else's, say).
bin="$PWD/bazel-out/k8-opt/bin"
args=("$@")
if [[ " ${args[*]-} " != *" --cuda_driver"* ]]; then
  args=("--cuda_driver=$bin/tests/fake_cuda/libfakecuda.so" "${args[@]}")
fi
"$bin/bench/gpu_bench" "${args[@]}"
