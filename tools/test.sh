#!/usr/bin/env bash
# Every test: installs what is missing, runs the whole suite (CPU backend and
# CUDA backend over the fake driver; real-GPU cases run where a GPU is),
# then the docker-compose integration suite with the binaries just built
# (the daemon's image under docker-compose, driven from client containers),
# then the suite again under AddressSanitizer + UndefinedBehaviorSanitizer,
# then builds and tests the daemon as it builds on a machine without a CUDA
# toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."

phase() {  # phase NAME COMMAND...: runs it and says how long it took.
  local name=$1 started=$SECONDS
  shift
  "$@"
  echo "test.sh: $name passed in $((SECONDS - started)) s" >&2
}

bash tools/setup.sh
phase "bazel test" bazel test //...
phase "compose suite" bash tools/compose-test.sh
phase "bazel test --config=asan" bazel test --config=asan //...
phase "bazel test --config=nocuda" bazel test --config=nocuda //...
