#!/usr/bin/env bash
# Every test: installs what is missing, runs the whole suite (CPU backend and
# CUDA backend over the fake driver; real-GPU cases run where a GPU is), runs
# it again under AddressSanitizer + UndefinedBehaviorSanitizer, then builds
# and tests the daemon as it builds on a machine without a CUDA toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bazel test //...
bazel test --config=asan //...
bazel test --config=nocuda //...
