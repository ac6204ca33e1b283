#!/usr/bin/env bash
# Gathers what the container images ship from a Bazel output tree into one
# folder, the layout every image stage copies from. It runs in the Dockerfile's
# builder stage and, on the host, in tools/compose-test.sh (which fills the
# gitignored deploy/docker/prebuilt/ so images reuse the binaries the host
# already built instead of compiling everything again inside Docker).
#
#   deploy/docker/collect.sh BAZEL_BIN OUT     (from the repository root)
#
# BAZEL_BIN is the tree holding server/gpustreamd, tools/gpustreamctl/
# gpustreamctl, examples/demo and client/python/gpustream/v1/*_pb2*.py
# (bazel build //server:gpustreamd //tools/gpustreamctl:gpustreamctl
# //examples:demo //client/python:gpustream_py_proto). OUT is replaced:
#
#   OUT/bin/gpustreamd, gpustreamctl, gpustream-demo
#   OUT/runtime-packages            Debian packages of the libraries they load
#   OUT/python/gpustream/...        the Python package with generated stubs
#   OUT/share/examples/demo.py      the Python demo
#   OUT/share/tests/compose/*.py    the compose suite's client-side tests
#   OUT/share/grafana/gpustream.json  the dashboard (checked by the suite)
set -euo pipefail

if (($# != 2)); then
  echo "usage: deploy/docker/collect.sh BAZEL_BIN OUT" >&2
  exit 2
fi
bin=$1
out=$2
cd "$(dirname "$0")/../.."

need() {
  [[ -f "$1" ]] || {
    echo "collect: $1 is missing: build it first (see the header of $0)" >&2
    exit 1
  }
}
for f in server/gpustreamd tools/gpustreamctl/gpustreamctl examples/demo \
  client/python/gpustream/v1/gpustream_pb2.py \
  client/python/gpustream/v1/gpustream_pb2_grpc.py; do
  need "$bin/$f"
done

rm -rf "$out"
mkdir -p "$out/bin" "$out/python" "$out/share/examples" "$out/share/tests"
# install(1), not cp: Bazel outputs are read-only and this gives every file
# one known mode, whatever the umask of the host or the builder.
install -m 0755 "$bin/server/gpustreamd" "$out/bin/gpustreamd"
install -m 0755 "$bin/tools/gpustreamctl/gpustreamctl" "$out/bin/gpustreamctl"
install -m 0755 "$bin/examples/demo" "$out/bin/gpustream-demo"

# The package's own sources, then the stubs Bazel generated beside them.
(cd client/python && find gpustream -name '*.py' -print0) |
  while IFS= read -r -d '' f; do
    install -D -m 0644 "client/python/$f" "$out/python/$f"
  done
install -m 0644 "$bin"/client/python/gpustream/v1/gpustream_pb2.py \
  "$bin"/client/python/gpustream/v1/gpustream_pb2_grpc.py \
  "$out/python/gpustream/v1/"

# The Debian packages whose shared libraries the binaries load (ldd, then
# their owners in dpkg's database), one a line: what the images install, so a library the daemon
# starts to link is installed without anyone editing the Dockerfile.
# usrmerge: ldd may say /lib/... where dpkg knows /usr/lib/..., or the
# other way round, and name a symlink where dpkg knows the file, so every
# library is looked up under all those names. One grep over dpkg's file
# lists (what dpkg -S reads) instead of dpkg -S, which takes ~15 s for the
# ~250 names here.
missing=$(ldd "$out"/bin/* | awk '$2 == "=>" && $3 == "not" { print $1 }')
if [[ -n "$missing" ]]; then
  echo "collect: the binaries need libraries this machine lacks:" \
    "${missing//$'\n'/ }" >&2
  exit 1
fi
mapfile -t libs < <(ldd "$out"/bin/* |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
mapfile -t reals < <(readlink -f "${libs[@]}")
# "LIBRARY NAME" for each name a library may be known under.
pairs=$(for i in "${!libs[@]}"; do
  for p in "${libs[i]}" "${reals[i]}"; do
    printf '%s %s\n' "${libs[i]}" "$p" "${libs[i]}" "${p#/usr}" \
      "${libs[i]}" "/usr${p#/usr}"
  done
done)
# dpkg's file lists give "/var/lib/dpkg/info/PACKAGE[:ARCH].list:PATH" for
# each name dpkg knows; the first owner found per library is its package.
cut -d' ' -f2 <<<"$pairs" | sort -u >"$out/.names"
lists=(/var/lib/dpkg/info/*.list)
grep -Fx --file="$out/.names" -- "${lists[@]}" |
  awk -v pairs="$pairs" '
    {
      i = index($0, ".list:")
      package = substr($0, 1, i - 1)
      sub(/.*\//, "", package)
      sub(/:.*/, "", package)
      owner[substr($0, i + 6)] = package
    }
    END {
      n = split(pairs, line, "\n")
      for (j = 1; j <= n; j++) {
        split(line[j], f, " ")
        if (!(f[1] in found) && (f[2] in owner)) found[f[1]] = owner[f[2]]
        libs[f[1]] = 1
      }
      status = 0
      for (lib in libs) {
        if (lib in found) {
          print found[lib]
        } else {
          print "collect: " lib " is not from a Debian package: no image " \
            "can install it" > "/dev/stderr"
          status = 1
        }
      }
      exit status
    }' | sort -u >"$out/runtime-packages"
rm -f "$out/.names"

install -m 0755 examples/demo.py "$out/share/examples/demo.py"
mkdir -p "$out/share/tests/compose" "$out/share/grafana"
install -m 0644 tests/compose/*.py "$out/share/tests/compose/"
install -m 0644 deploy/grafana/gpustream.json "$out/share/grafana/"
