#!/usr/bin/env bash
# The C++ client used outside the repository: installs it with
# //client:install into a fresh prefix, builds examples/out_of_tree with
# make and `pkg-config --cflags --libs gpustream-client`, and runs the
# program against a real gpustreamd on a unix socket.
set -euo pipefail

runfiles="${TEST_SRCDIR:?}/gpustream"
tmp="${TEST_TMPDIR:?}"
prefix="$tmp/prefix"

RUNFILES_DIR="$TEST_SRCDIR" "$runfiles/client/install" "$prefix"
for f in lib/libgpustream-client.a include/client/gpustream.h \
    include/kernels/cpu/gpustream_cpu_module.h \
    lib/pkgconfig/gpustream-client.pc; do
  [[ -f $prefix/$f ]] || { echo "not installed: $f" >&2; exit 1; }
done

# A copy, as a user's project would be: nothing of the repository's tree.
project="$tmp/project"
mkdir -p "$project"
cp "$runfiles/examples/out_of_tree/main.cc" \
  "$runfiles/examples/out_of_tree/Makefile" "$project/"
# An instrumented archive (the ASan/TSan test configurations) links only
# with its sanitizer's runtime.
extra=""
if nm "$prefix/lib/libgpustream-client.a" 2>/dev/null | grep -q __asan_; then
  extra="-fsanitize=address,undefined"
elif nm "$prefix/lib/libgpustream-client.a" 2>/dev/null | grep -q __tsan_; then
  extra="-fsanitize=thread"
fi
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" make -C "$project" \
  CXXFLAGS="-O1 -Wall -Werror $extra"

# A short path: unix socket paths have at most 107 characters.
sockets=$(mktemp -d /tmp/gs-install-test.XXXXXX)
socket="$sockets/d.sock"
"$runfiles/server/gpustreamd" --backend=cpu --listen="unix:$socket" \
  --ready_file="$tmp/ready" 2>"$tmp/daemon.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null || true; rm -rf "$sockets"' EXIT
for _ in $(seq 300); do
  [[ -s $tmp/ready ]] && break
  kill -0 "$daemon" 2>/dev/null || break
  sleep 0.1
done
[[ -s $tmp/ready ]] || { cat "$tmp/daemon.log" >&2; exit 1; }

output=$(GPUSTREAM_TARGET="unix:$socket" "$project/counter")
echo "$output"
[[ $output =~ ^session\ s-[0-9a-f]{16}:\ counter\ =\ 42$ ]]
kill "$daemon"
wait "$daemon"
echo "install_test: passed"
