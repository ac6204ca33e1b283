#!/usr/bin/env bash
# The compose integration suite: gpustreamd in its container image, driven
# from client containers over the shared unix-socket volume and over the
# compose network with TLS, tokens and an mTLS client certificate
# (deploy/docker-compose.yml). Every step asserts what it printed, not only
# its exit status. docs/containers.md describes it.
#
#   tools/compose-test.sh                images from the binaries Bazel built
#                                        on this machine (built here first)
#   tools/compose-test.sh --from-source  images compiled inside Docker (the
#                                        Dockerfile's builder stage: a full
#                                        Bazel build, ~5 min more on 2 cores)
#
# Uses the running Docker engine when `docker info` answers, else starts its
# own dockerd (data under $GPUSTREAM_COMPOSE_CACHE, default
# /var/lib/gpustream-compose, so images survive between runs) and stops it
# at the end. Debian base images that are absent and cannot be pulled are
# made once with debootstrap. Always tears down: containers, the volume,
# temporary credentials, its own dockerd. The whole run is bounded by
# $GPUSTREAM_COMPOSE_TIMEOUT seconds (default 1200; 3600 with
# --from-source). Must run as root (dockerd, and the credentials are handed
# to the images' uid 10001).

# SC2016: the client containers' sh -c scripts are single-quoted on
# purpose: their variables expand inside the container, and tokens never
# appear on a command line (they go from the mounted file into the
# environment). SC2317: shellcheck takes the EXIT trap's functions for
# unreachable code.
# shellcheck disable=SC2016,SC2317

# The whole script is one { ... } block, which bash reads completely before
# running it: editing the file during a run (an hour with --from-source)
# cannot change what the running one does next.
{
set -euo pipefail

usage() {
  sed -n '8,13p' "$0" | sed 's/^# \{0,1\}//'
}

from_source=0
for arg in "$@"; do
  case "$arg" in
    --from-source) from_source=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done

self=$(readlink -f "$0")
cd "$(dirname "$self")/.."

# The bound: run again under timeout(1). On expiry, or on Ctrl-C / TERM
# forwarded to it, timeout signals every process of the run (its process
# group; inner bounds use --foreground to stay in it), and the EXIT trap
# below tears down. Our own dockerd runs in a session of its own so that
# the signal does not stop it before the trap has removed the containers.
if [[ -z "${GPUSTREAM_COMPOSE_BOUND:-}" ]]; then
  limit=${GPUSTREAM_COMPOSE_TIMEOUT:-$((from_source ? 3600 : 1200))}
  export GPUSTREAM_COMPOSE_BOUND=$limit
  # --kill-after outlasts the teardown's own bounds (logs 30 s, down 120 s,
  # dockerd 30 s), so a timed-out run still cleans up.
  timeout --kill-after=200 "$limit" bash "$self" "$@" &
  bound=$!
  trap 'kill -TERM "$bound" 2>/dev/null' INT TERM
  status=0
  wait "$bound" || status=$?
  while kill -0 "$bound" 2>/dev/null; do  # wait returned for a signal.
    status=0
    wait "$bound" || status=$?
  done
  if ((status == 124)); then
    echo "compose-test: FAILED: the run took more than $limit s" \
      "(GPUSTREAM_COMPOSE_TIMEOUT)" >&2
  fi
  exit "$status"
fi
# bounded SECONDS COMMAND...: COMMAND, stopped after SECONDS.
bounded() { timeout --foreground --kill-after=10 "$@"; }

if [[ $(id -u) != 0 ]]; then
  echo "compose-test: must run as root (dockerd, credentials for uid 10001)" >&2
  exit 2
fi

cache=${GPUSTREAM_COMPOSE_CACHE:-/var/lib/gpustream-compose}
project=gpustreamcompose
export GPUSTREAM_TAG=${GPUSTREAM_TAG:-dev}
export DOCKER_BUILDKIT=1
# docker.io's own client: a newer docker CLI earlier on PATH may lack the
# buildx plugin that its `docker build` needs, while this one has BuildKit
# built in (clients and engines negotiate their API version).
docker=docker
[[ -x /usr/bin/docker ]] && docker=/usr/bin/docker

started=$SECONDS
step_name="setup"
step_started=$SECONDS
passed=()
work=""
dockerd_pid=""

step() {
  step_name=$1
  step_started=$SECONDS
  printf '\n== %s\n' "$step_name"
}
ok() {
  passed+=("$(printf '%-70s %4ds' "$step_name" $((SECONDS - step_started)))")
}
fail() {
  echo "compose-test: FAILED: $step_name: $*" >&2
  exit 1
}

# compose SECONDS ARGS...: docker-compose on this project, bounded.
compose() {
  local seconds=$1
  shift
  bounded "$seconds" docker-compose -p "$project" \
    -f deploy/docker-compose.yml "$@"
}

# Runs a command in a fresh client container; its output (stdout and stderr)
# goes to the terminal and into $output. The daemon container must be
# healthy (depends_on in the compose file).
output=""
client() {
  local status=0
  output=$(compose 300 run --rm -T client "$@" 2>&1) || status=$?
  printf '%s\n' "$output" | grep -v -e '^Creating ' -e '^Starting ' || true
  return "$status"
}
# expect TEXT...: every TEXT must appear in $output.
expect() {
  local text
  for text in "$@"; do
    grep -qF -- "$text" <<<"$output" || fail "output lacks \"$text\""
  done
}

cleanup() {
  local status=$?
  set +e
  trap - EXIT INT TERM
  if ((status != 0)) && [[ -n "${daemon:-}" ]]; then
    echo "---- gpustreamd's last log lines" >&2
    compose 30 logs --no-color --tail=40 gpustreamd >&2 2>/dev/null
    echo "---- prometheus's last log lines" >&2
    compose 30 logs --no-color --tail=20 prometheus >&2 2>/dev/null
  fi
  if [[ -n "${docker_up:-}" ]]; then
    compose 120 --profile client down -v --remove-orphans -t 10 \
      >/dev/null 2>&1 ||
      echo "compose-test: warning: docker-compose down failed" >&2
  fi
  stop_dockerd
  [[ -n "$work" ]] && rm -rf "$work"
  if ((status == 0)); then
    echo
    echo "compose-test: passed (${#passed[@]} steps, $((SECONDS - started)) s):"
    printf '  %s\n' "${passed[@]}"
  else
    echo "compose-test: FAILED at \"$step_name\" after" \
      "$((SECONDS - started)) s" >&2
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

stop_dockerd() {
  [[ -n "$dockerd_pid" ]] || return 0
  kill -TERM "$dockerd_pid" 2>/dev/null
  for _ in $(seq 1 60); do  # At most 30 s, then KILL.
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$dockerd_pid" 2>/dev/null; then
    echo "compose-test: dockerd $dockerd_pid did not stop: killing it" >&2
    kill -KILL "$dockerd_pid" 2>/dev/null
  fi
  rm -f "$cache/dockerd.pid"
  dockerd_pid=""
}

# ---------------------------------------------------------------------------
step "setup: packages, lock, credentials"
bash tools/setup.sh
mkdir -p "$cache"
# One run at a time per machine: runs share the project name, and a data
# root serves one dockerd.
exec 9>"$cache/lock"
flock -w 600 9 || fail "another compose-test has held $cache/lock for 10 min"
work=$(mktemp -d /tmp/gpustream-compose.XXXXXX)
chmod 0755 "$work"
bash deploy/compose/make-credentials.sh "$work/secrets"
export GPUSTREAM_SECRETS="$work/secrets"
bounded 60 docker-compose -f deploy/docker-compose.yml config -q ||
  fail "deploy/docker-compose.yml does not validate"
bounded 60 docker-compose -f deploy/docker-compose.yml -f deploy/compose/gpu.yml \
  config -q || fail "deploy/compose/gpu.yml does not validate"
ok

# ---------------------------------------------------------------------------
step "Docker engine"
if bounded 20 "$docker" info >/dev/null 2>&1; then
  echo "using the running engine (${DOCKER_HOST:-default socket})"
else
  # A dockerd a killed run left behind (same data root): it is ours, and
  # two engines must never share one data root.
  if [[ -s "$cache/dockerd.pid" ]]; then
    old=$(cat "$cache/dockerd.pid")
    if [[ "$(cat "/proc/$old/comm" 2>/dev/null)" == dockerd ]]; then
      echo "stopping dockerd $old left by an earlier run"
      dockerd_pid=$old
      stop_dockerd
    fi
  fi
  mkdir -p "$cache/docker"
  export DOCKER_HOST="unix://$work/docker.sock"
  # Our own engine changes the host as little as it can: no default
  # bridge, no IP forwarding, no masquerading, so containers reach only
  # each other on the compose network; image builds use the host's
  # network for apt (docker build --network=host below).
  setsid dockerd --data-root="$cache/docker" --exec-root="$work/exec" \
    --pidfile="$work/dockerd.pid" --host="$DOCKER_HOST" \
    --bridge=none --ip-forward=false --ip-masq=false \
    >"$work/dockerd.log" 2>&1 </dev/null 9>&- &
  dockerd_pid=$!
  echo "$dockerd_pid" >"$cache/dockerd.pid"
  for _ in $(seq 1 120); do  # At most 60 s.
    bounded 10 "$docker" info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || {
      tail -20 "$work/dockerd.log" >&2
      fail "dockerd exited"
    }
    sleep 0.5
  done
  bounded 10 "$docker" info >/dev/null 2>&1 || {
    tail -20 "$work/dockerd.log" >&2
    fail "dockerd did not answer within 60 s"
  }
  echo "started dockerd $dockerd_pid (data root $cache/docker)"
fi
docker_up=1
# Leftovers of an interrupted run of this project.
compose 120 --profile client down -v --remove-orphans -t 5 >/dev/null 2>&1 ||
  true
ok

# ---------------------------------------------------------------------------
step "Debian base images"
image_exists() { "$docker" image inspect "$1" >/dev/null 2>&1; }
# ensure_base IMAGE: present, or pulled; else 1.
ensure_base() {
  image_exists "$1" && return 0
  bounded 120 "$docker" pull -q "$1" >/dev/null 2>&1
}
# base_works IMAGE: it has a shell and apt.
base_works() {
  bounded 60 "$docker" run --rm --network none "$1" apt-get --version \
    >/dev/null 2>&1
}
local_base=gpustream-local/debian:bookworm-minbase
runtime_base=debian:bookworm-slim
builder_base=debian:bookworm
if ! ensure_base "$runtime_base" ||
  { ((from_source)) && ! ensure_base "$builder_base"; }; then
  # No registry: a minimal Debian 12 from the Debian mirror, made once and
  # kept under its own name (official tags are never shadowed). Builder and
  # runtime stages both start from it.
  if image_exists "$local_base" && ! base_works "$local_base"; then
    echo "$local_base is broken (an interrupted import?): making it again"
    "$docker" rmi -f "$local_base" >/dev/null
  fi
  if ! image_exists "$local_base"; then
    echo "no registry: making $local_base with debootstrap (about a minute)"
    mirror=${GPUSTREAM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
    bounded 900 debootstrap --variant=minbase bookworm "$work/rootfs" \
      "$mirror" >"$work/debootstrap.log" 2>&1 || {
      tail -20 "$work/debootstrap.log" >&2
      fail "debootstrap failed"
    }
    cat >"$work/rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF
    # What debian:*-slim does: no manuals or translations from later
    # installs, and no package cache kept in image layers.
    cat >"$work/rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb \
      "$work/rootfs/var/lib/apt/lists/"*
    # Checked by running it: a broken pipe imports an empty image, which
    # must not stay cached under the name.
    if ! tar --numeric-owner -C "$work/rootfs" -c . |
      bounded 300 "$docker" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' - "$local_base" >/dev/null ||
      ! base_works "$local_base"; then
      "$docker" rmi -f "$local_base" >/dev/null 2>&1
      fail "docker import of the debootstrap tree failed"
    fi
    rm -rf "$work/rootfs"
  fi
  runtime_base=$local_base
  builder_base=$local_base
fi
echo "runtime stage from $runtime_base"
((from_source)) && echo "builder stage from $builder_base"
ok

# ---------------------------------------------------------------------------
build_args=(--build-arg "RUNTIME_IMAGE=$runtime_base"
  --build-arg "BUILDER_IMAGE=$builder_base")
if ((from_source)); then
  step "images from source (Bazel inside Docker)"
  build_args+=(--build-arg BINARIES=builder)
else
  step "binaries (bazel build) and images from them"
  # 9>&-: a Bazel server started here must not inherit the lock.
  bazel build //server:gpustreamd //tools/gpustreamctl:gpustreamctl \
    //examples:demo //client/python:gpustream_py_proto 9>&-
  bash deploy/docker/collect.sh "$(bazel info bazel-bin 9>&-)" \
    deploy/docker/prebuilt
  build_args+=(--build-arg BINARIES=prebuilt)
fi
for target in runtime client prometheus; do
  image=gpustream/$target:$GPUSTREAM_TAG
  [[ $target == runtime ]] && image=gpustream/gpustreamd:$GPUSTREAM_TAG
  "$docker" build --progress=plain --network=host \
    -f deploy/docker/Dockerfile \
    --target "$target" -t "$image" "${build_args[@]}" . \
    >"$work/build-$target.log" 2>&1 || {
    tail -40 "$work/build-$target.log" >&2
    fail "docker build --target $target failed"
  }
  echo "built $image"
done
[[ "$("$docker" image inspect -f '{{.Config.User}}' \
  "gpustream/gpustreamd:$GPUSTREAM_TAG")" == 10001:10001 ]] ||
  fail "the runtime image does not run as 10001:10001"
ok

# ---------------------------------------------------------------------------
step "gpustreamd and Prometheus up, gpustreamd healthy"
compose 120 up -d gpustreamd prometheus || fail "docker-compose up failed"
daemon=$(compose 30 ps -q gpustreamd)
[[ -n "$daemon" ]] || fail "no gpustreamd container"
echo "container ${daemon:0:12}"
health=""
for _ in $(seq 1 90); do  # At most 90 s (start_period 30 s, 2 s polls).
  health=$("$docker" inspect -f '{{.State.Health.Status}}' "$daemon")
  [[ $health == healthy ]] && break
  [[ "$("$docker" inspect -f '{{.State.Running}}' "$daemon")" == true ]] ||
    fail "gpustreamd exited"
  sleep 1
done
[[ $health == healthy ]] || fail "gpustreamd is $health after 90 s"
[[ "$(bounded 30 "$docker" exec "$daemon" id -u)" == 10001 ]] ||
  fail "gpustreamd does not run as uid 10001"
ok

# ---------------------------------------------------------------------------
# C++ demo lines that prove results were read back and checked.
demo_lines=("0 wrong" "counter 0 before signal, 42 after"
  "host function ran; counter now 44" "demo: all checks passed")

step "C++ demo over the unix socket volume (team-a token)"
client sh -c 'GPUSTREAM_TOKEN=$(cat "$GPUSTREAM_CLIENT_DIR/team-a.token") \
  exec gpustream-demo --target="$GPUSTREAM_UNIX_TARGET"' ||
  fail "exit status $?"
expect "${demo_lines[@]}"
ok

step "C++ demo over the network: TLS + token (team-a)"
client sh -c 'GPUSTREAM_TOKEN=$(cat "$GPUSTREAM_CLIENT_DIR/team-a.token") \
  exec gpustream-demo --target="$GPUSTREAM_TCP_TARGET" \
    --tls_ca="$GPUSTREAM_CLIENT_DIR/ca.crt"' || fail "exit status $?"
expect "${demo_lines[@]}"
ok

step "C++ demo over the network: mTLS client certificate (team-b)"
client sh -c 'exec gpustream-demo --target="$GPUSTREAM_TCP_TARGET" \
  --tls_ca="$GPUSTREAM_CLIENT_DIR/ca.crt" \
  --tls_cert="$GPUSTREAM_CLIENT_DIR/team-b.crt" \
  --tls_key="$GPUSTREAM_CLIENT_DIR/team-b.key"' || fail "exit status $?"
expect "${demo_lines[@]}"
ok

step "Python demo over the network: TLS + token (team-a)"
client sh -c 'GPUSTREAM_TOKEN=$(cat "$GPUSTREAM_CLIENT_DIR/team-a.token") \
  exec gpustream-demo-py --target="$GPUSTREAM_TCP_TARGET" \
    --tls_ca="$GPUSTREAM_CLIENT_DIR/ca.crt"' || fail "exit status $?"
expect "0 wrong" "counter 0 before signal, 42 after" \
  "host function ran; counter now 44" "demo: all checks passed"
ok

step "pytest: tests/compose/test_compose.py"
client python3 -m pytest -p no:cacheprovider -v \
  /usr/local/share/gpustream/tests/compose/test_compose.py ||
  fail "pytest failed"
expect " passed"
if grep -qE '[0-9]+ (failed|error)' <<<"$output"; then fail "pytest failed"; fi
ok

step "gpustreamctl: health, sessions/stats/kill as admin, exit 4 otherwise"
client python3 /usr/local/share/gpustream/tests/compose/check_gpustreamctl.py ||
  fail "gpustreamctl checks failed"
expect "ctl: all checks passed"
ok

step "Prometheus metrics scraped from a client container"
client python3 /usr/local/share/gpustream/tests/compose/check_metrics.py ||
  fail "metrics checks failed"
expect "expectations hold"
ok

step "Grafana dashboard: every PromQL expression has series in Prometheus"
client python3 /usr/local/share/gpustream/tests/compose/check_dashboard.py \
  /usr/local/share/gpustream/grafana/gpustream.json ||
  fail "dashboard checks failed"
expect "every expression returned series"
ok

step "JSON logs, tenants named, no token leaked"
"$docker" logs "$daemon" >"$work/gpustreamd.log" 2>&1
python3 tests/compose/check_logs.py "$work/gpustreamd.log" \
  "$GPUSTREAM_SECRETS/client" || fail "log checks failed"
ok

step "SIGTERM: gpustreamd stops cleanly, never restarted"
[[ "$("$docker" inspect -f '{{.RestartCount}}' "$daemon")" == 0 ]] ||
  fail "gpustreamd was restarted (it crashed during the suite)"
bounded 60 "$docker" stop -t 30 "$daemon" >/dev/null ||
  fail "docker stop failed"
code=$("$docker" inspect -f '{{.State.ExitCode}}' "$daemon")
[[ $code == 0 ]] || fail "gpustreamd exited with status $code after SIGTERM"
ok
exit 0
}
