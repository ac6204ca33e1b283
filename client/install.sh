#!/usr/bin/env bash
# Installs the C++ client for projects built outside this repository:
#   bazel run //client:install -- PREFIX
# writes PREFIX/lib/libgpustream-client.a (the client and its generated
# protocol code in one archive), PREFIX/include/{client,proto,server,
# kernels/cpu}/... (the headers, laid out as in the repository, so
# `#include "client/gpustream.h"` works) and
# PREFIX/lib/pkgconfig/gpustream-client.pc; then
#   PKG_CONFIG_PATH=PREFIX/lib/pkgconfig \
#     g++ main.cc $(pkg-config --cflags --libs gpustream-client)
# builds against it. Idempotent: it overwrites what it installed before.
set -euo pipefail

if [[ $# -ne 1 || $1 == -* ]]; then
  echo "usage: bazel run //client:install -- PREFIX" >&2
  exit 2
fi
prefix=$1
# `bazel run` starts us in the runfiles tree; a relative PREFIX means the
# caller's directory.
if [[ $prefix != /* ]]; then
  prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix"
fi
runfiles="${RUNFILES_DIR:-$0.runfiles}/gpustream"
[[ -d $runfiles ]] || runfiles=$PWD

mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0644 "$runfiles/client/libgpustream-client.a" "$prefix/lib/"
while read -r header; do
  install -D -m 0644 "$runfiles/$header" "$prefix/include/$header"
done < "$runfiles/client/installed_headers.txt"
version=$(sed -n 's/.*kServerVersion\[\] = "\(.*\)";/\1/p' \
  "$runfiles/server/version.h")
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" \
  "$runfiles/client/gpustream-client.pc.in" \
  > "$prefix/lib/pkgconfig/gpustream-client.pc"
echo "installed the gpustream C++ client $version into $prefix"
