#!/usr/bin/env bash
# Builds and runs the benchmarks (figures in README.md): round trips and
# launch rates (gpustream_bench), the CPU scheduler's fair shares
# (fair_share_bench), and what 1,000 idle sessions cost a real daemon
# (idle_sessions_bench). Arguments go to gpustream_bench.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bazel build //bench:gpustream_bench //bench:fair_share_bench \
  //bench:idle_sessions_bench //server:gpustreamd
bin=bazel-out/k8-opt/bin
"$bin/bench/gpustream_bench" "$@"
"$bin/bench/fair_share_bench"
"$bin/bench/idle_sessions_bench" --daemon="$bin/server/gpustreamd"
