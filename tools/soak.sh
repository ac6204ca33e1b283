#!/usr/bin/env bash
# The soak test: gpustreamd under sustained load, kill storms, misbehaving
# clients and drain on SIGTERM. Exit status 0 when every phase passed; each
# prints its figures.
#
#   bash tools/soak.sh           # the long version (README's figures)
#   bash tools/soak.sh --short   # the CI version, a few minutes on 2 cores
#                                (each phase bounded to 240 s)
set -euo pipefail
cd "$(dirname "$0")/.."

short=()
phase_limit_s=3600
if [[ "${1:-}" == "--short" ]]; then
  short=(--short)
  phase_limit_s=240
elif [[ $# -gt 0 ]]; then
  echo "usage: tools/soak.sh [--short]" >&2
  exit 2
fi

# The driver of the running phase. On any exit, it gets SIGTERM (it kills
# its clients and stops its daemon), then SIGKILL if it lingers; its
# children die with it either way (PR_SET_PDEATHSIG, set by util-linux's
# setpriv, which the drivers spawn every child through).
driver=""
cleanup() {
  if [[ -n "$driver" ]] && kill -0 "$driver" 2>/dev/null; then
    kill -TERM "$driver" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$driver" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$driver" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP

# Everything the phases run: load.py uses the daemon, soak_client and
# gpustreamctl from $bin; abuse.py and drain.py (tools/soak/gsd.py) use the
# daemon at the same path and generate their Python stubs from proto/ with
# the system's protoc and grpc_python_plugin (no bazel target).
soak_t0=$SECONDS
bazel build //server:gpustreamd //tools/soak:soak_client //tools/gpustreamctl
bin=bazel-out/k8-opt/bin
for tool in protoc grpc_python_plugin; do
  if ! command -v "$tool" >/dev/null; then
    echo "soak: $tool not found (abuse.py and drain.py need it)" >&2
    exit 1
  fi
done
if ! setpriv --help 2>/dev/null | grep -q -- --pdeathsig; then
  echo "soak: setpriv with --pdeathsig (util-linux) not found" >&2
  exit 1
fi
if ! /usr/bin/python3 -c "import grpc, google.protobuf" 2>/dev/null; then
  echo "soak: /usr/bin/python3 lacks grpc/protobuf (abuse.py, drain.py)" >&2
  exit 1
fi

# Runs one phase's driver, bounded by phase_limit_s.
run_phase() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "=== soak phase: $name (limit ${phase_limit_s} s)"
  timeout --signal=TERM --kill-after=30 "$phase_limit_s" "$@" &
  driver=$!
  if ! wait "$driver"; then
    driver=""
    echo "=== soak phase $name FAILED after $((SECONDS - t0)) s" >&2
    exit 1
  fi
  driver=""
  echo "=== soak phase $name passed in $((SECONDS - t0)) s"
}

# Load, then the kill storm, on one daemon: N clients x 8 queues verifying
# every result with RSS and threads flat; K clients SIGKILLed in waves with
# every counter back afterwards.
run_phase "load + kill storm" /usr/bin/python3 tools/soak/load.py all \
  --bin_dir="$bin" "${short[@]}"

# Misbehaving clients: raw connections that never send or stall mid-frame,
# the server's SETTINGS (MAX_CONCURRENT_STREAMS), thousands of connections,
# clients that never read their streams (VmRSS back down afterwards). Its
# own daemon, the opt build from the line above (--no_build).
run_phase "abuse" /usr/bin/python3 tools/soak/abuse.py --no_build "${short[@]}"

# Drain on SIGTERM under load: acknowledged work proven or answered
# UNAVAILABLE (its own result, or the stream's "daemon shutting down"),
# results still delivered after the signal, exit within 10 s, restart on the
# same socket and port with its ready file within 5 s.
run_phase "drain" /usr/bin/python3 tools/soak/drain.py --no_build "${short[@]}"

echo "=== soak: every phase passed in $((SECONDS - soak_t0)) s"
