#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, builds,
# starts gpustreamd on the CPU backend (sample module built in), runs the
# demo client against it in C++ and then in Python, and stops the daemon
# cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bazel build //server:gpustreamd //examples:demo //examples:demo_py

socket="/tmp/gpustream-demo-$$.sock"
ready="/tmp/gpustream-demo-$$.ready"
rm -f "$ready"
bazel-bin/server/gpustreamd --backend=cpu --listen="unix:$socket" \
  --ready_file="$ready" &
daemon=$!
trap 'kill "$daemon" 2>/dev/null || true; rm -f "$ready" "$socket"' EXIT

for _ in $(seq 1 300); do  # At most 30 s.
  [[ -s "$ready" ]] && break
  kill -0 "$daemon" 2>/dev/null || { echo "demo: gpustreamd exited" >&2; exit 1; }
  sleep 0.1
done
[[ -s "$ready" ]] || { echo "demo: gpustreamd did not start" >&2; exit 1; }

status=0
bazel-bin/examples/demo --target="unix:$socket" || status=$?
if ((status == 0)); then
  bazel-bin/examples/demo_py --target="unix:$socket" || status=$?
fi
kill -TERM "$daemon"
wait "$daemon" || { echo "demo: gpustreamd did not stop cleanly" >&2; exit 1; }
trap - EXIT
rm -f "$ready"
exit "$status"
