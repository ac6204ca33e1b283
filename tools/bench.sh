#!/usr/bin/env bash
# Builds and runs the benchmark (figures in README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bazel build //bench:gpustream_bench
bazel-bin/bench/gpustream_bench "$@"
