#!/usr/bin/env bash
# Builds and runs the benchmarks (figures in README.md and
# docs/benchmarks.md): round trips, launch rates and the data plane
# (gpustream_bench), the CPU scheduler's fair shares (fair_share_bench), and
# what 1,000 idle sessions cost a real daemon (idle_sessions_bench).
#
#   bash tools/bench.sh [--plots DIR] [gpustream_bench flags...]
#
# --plots DIR also runs the GPU benchmark on the fake CUDA driver (where the
# build has CUDA support) and draws DIR/latency_cdf.png, launch_rates.png
# and fair_share.png (tools/plot_bench.py, matplotlib) from the figures the
# benches write into DIR. Other arguments go to gpustream_bench.
set -euo pipefail
cd "$(dirname "$0")/.."

plots=""
args=()
while (($#)); do
  case $1 in
    --plots) plots=${2:?--plots needs a folder}; shift 2 ;;
    --plots=*) plots=${1#--plots=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

bash tools/setup.sh
bazel build -c opt //bench:gpustream_bench //bench:fair_share_bench \
  //bench:idle_sessions_bench //server:gpustreamd
bin=bazel-out/k8-opt/bin
samples=()
if [[ -n $plots ]]; then
  mkdir -p "$plots"
  plots=$(cd "$plots" && pwd)
  samples=("--samples_dir=$plots")
fi
"$bin/bench/gpustream_bench" ${samples[@]+"${samples[@]}"} \
  ${args[@]+"${args[@]}"}
# Instructions per launch, per layer: each layer's launch rate alone under
# callgrind at two launch counts; what the extra launches added, over their
# number, is what one launch costs (every thread of the process counted,
# start-up and teardown cancelled out). Deterministic, unlike the rates on
# a shared 2-core machine, so each change to the launch path is measured.
instructions_per_launch() {  # LAYER
  local n out ir=()
  for n in 20000 120000; do
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$out" \
      "$bin/bench/gpustream_bench" --launch_rate_only="$1" --launches="$n" \
      >/dev/null 2>&1
    ir+=("$(sed -n 's/^summary: //p' "$out")")
    rm -f "$out"
  done
  echo $(((ir[1] - ir[0]) / 100000))
}
if command -v valgrind >/dev/null; then
  echo
  for layer in in_process submit_unix submit_tcp; do
    printf '%-48s %12s instructions per launch (callgrind)\n' \
      "noop launch, $layer" "$(instructions_per_launch "$layer")"
  done
  echo
fi
# A missed fairness goal (exit 1) still lets the rest run and draw.
status=0
"$bin/bench/fair_share_bench" ${samples[@]+"${samples[@]}"} || status=$?
"$bin/bench/idle_sessions_bench" --daemon="$bin/server/gpustreamd"
if [[ -n $plots ]]; then
  rm -f "$plots/gpu_bench.json"
  bash tools/gpu-bench.sh --launches=100000 --round_trips=500 \
    "--samples_dir=$plots" || status=$?
  # Debian's python3, where setup.sh installed matplotlib (a python3
  # earlier on PATH, e.g. pyenv's, may lack it).
  /usr/bin/python3 tools/plot_bench.py "$plots"
fi
exit "$status"
