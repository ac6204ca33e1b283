#!/usr/bin/env bash
# Builds and runs the GPU benchmark (bench/gpu_bench.cc): a GPU backend of
# the daemon against the same vendor's driver used directly, side by side.
#
#   bash tools/gpu-bench.sh [--backend=cuda|hip] [gpu_bench flags...]
#   bash tools/gpu-bench.sh --sharing [sharing_bench flags...]
#
# --sharing runs bench/sharing_bench.cc instead: two tenants on one CUDA
# device under the gpu_sharing modes (SM shares by weight, fault isolation).
#
# Without --cuda_driver (CUDA, the default) or --hip_runtime (HIP) it runs on
# the fake driver that Bazel builds (tests/fake_gpu, CPU emulation: the
# figures then say nothing about a GPU), so that it runs anywhere; on a GPU
# machine pass --cuda_driver=libcuda.so.1 or --hip_runtime=libamdhip64.so.6.
# Other flags go to gpu_bench (--launches, --round_trips).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
args=()
backend=cuda
bench=gpu_bench
for a in "$@"; do
  case $a in
    --backend=*) backend=${a#--backend=} ;;
    --sharing) bench=sharing_bench; continue ;;
  esac
  args+=("$a")
done
if [[ $bench == sharing_bench && $backend != cuda ]]; then
  echo "gpu-bench: --sharing measures the CUDA backend only (HIP has no" \
    "contexts of its own or SM partitions)" >&2
  exit 2
fi
# sharing_bench has no --backend flag: the modes are CUDA's.
if [[ $bench == sharing_bench && ${#args[@]} -gt 0 ]]; then
  kept=()
  for a in "${args[@]}"; do [[ $a == --backend=* ]] || kept+=("$a"); done
  args=(${kept[@]+"${kept[@]}"})
fi
case $backend in
  cuda)
    # The CUDA backend and its fake exist only where Bazel found a toolkit.
    if ! bazel query //tests/fake_cuda:libfakecuda.so >/dev/null 2>&1; then
      echo "gpu-bench: this build has no CUDA support (no CUDA toolkit at" \
        "\${GPUSTREAM_CUDA_PATH:-/usr/local/cuda}): skipped"
      exit 0
    fi
    fake=tests/fake_cuda/libfakecuda.so flag=--cuda_driver ;;
  hip) fake=tests/fake_hip/libfakehip.so flag=--hip_runtime ;;
  *) echo "gpu-bench: --backend=$backend: expected cuda or hip" >&2; exit 2 ;;
esac
bazel build -c opt "//bench:$bench" "//${fake%/*}:${fake##*/}"

# bazel-out/k8-opt, not bazel-bin: bazel-bin follows whichever build ran last
# (an ASan build of someone else's, say).
bin="$PWD/bazel-out/k8-opt/bin"
if [[ " ${args[*]-} " != *" $flag"* ]]; then
  args=("$flag=$bin/$fake" "${args[@]}")
fi
"$bin/bench/$bench" ${args[@]+"${args[@]}"}
