#!/usr/bin/env bash
# Every test: installs what is missing, runs the whole suite, then runs it
# again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bazel test //...
bazel test --config=asan //...
