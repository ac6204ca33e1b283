#!/usr/bin/env bash
# Builds the daemon, the Device conformance test, the GPU benchmark and the
# demo client (-c opt) and packs them into gpu-bundle/ (git-ignored): one
# folder to copy to a GPU machine that has an NVIDIA driver or AMD's ROCm
# runtime and nothing else
# (no Bazel, no gRPC/protobuf/Abseil, no package registry) and run there with
# `bash gpu-bundle/run.sh` (its header says what it checks). The bundle
# carries every shared library the binaries need beyond glibc, so it runs on
# any x86-64 Linux whose glibc is at least the one it was built against.
#
#   gpu-bundle/bin/       gpustreamd, device_conformance_test, gpu_bench, demo
#   gpu-bundle/lib/       the libraries (Debian's gRPC, protobuf, Abseil,
#                         OpenSSL, ..., and the test's Bazel-built ones)
#   gpu-bundle/lib/cxx/   libstdc++ and libgcc_s, used only where the
#                         machine's own are older than the binaries need
#   gpu-bundle/kernels/   the samples fatbin and manifest (built into the
#                         daemon too; here for inspection and --modules)
#   gpu-bundle/testdata/  the fake CUDA driver and HIP runtime, laid out as
#                         the conformance test's runfiles, so the bundle can
#                         test itself
#   gpu-bundle/REQUIRES   the glibc and C++ runtime versions the binaries need
#   gpu-bundle/BUILD_INFO what was built, from which commit, on what
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
bundle="$root/gpu-bundle"

bash tools/setup.sh
# The CUDA targets exist only where Bazel found a CUDA toolkit.
if ! bazel query //tests/fake_cuda:libfakecuda.so >/dev/null 2>&1; then
  echo "gpu-bundle: this build has no CUDA support (no CUDA toolkit at" \
    "\${GPUSTREAM_CUDA_PATH:-/usr/local/cuda}); nothing to bundle" >&2
  exit 1
fi
bazel build -c opt //server:gpustreamd //tests/conformance:device_conformance_test \
  //bench:gpu_bench //bench:sharing_bench //examples:demo \
  //tests/fake_cuda:libfakecuda.so \
  //tests/fake_hip:libfakehip.so //kernels/cuda:samples_module

# bazel-out/k8-opt, not bazel-bin: bazel-bin follows whichever build ran
# last, which may be an ASan build.
out="$root/bazel-out/k8-opt/bin"
binaries=(server/gpustreamd tests/conformance/device_conformance_test
  bench/gpu_bench bench/sharing_bench examples/demo)
fakes=(tests/fake_cuda/libfakecuda.so tests/fake_hip/libfakehip.so)

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib/cxx" "$bundle/kernels" \
  "$bundle/testdata/gpustream/tests/fake_cuda" \
  "$bundle/testdata/gpustream/tests/fake_hip"

# Copies $1 to $2 and strips its debug info (the symbols stay, so stack
# traces still name functions). Bazel's outputs are read-only.
copy_stripped() {
  cp "$1" "$2"
  chmod u+w "$2"
  strip --strip-debug "$2"
}

for b in "${binaries[@]}"; do
  copy_stripped "$out/$b" "$bundle/bin/$(basename "$b")"
done
for f in "${fakes[@]}"; do
  copy_stripped "$out/$f" "$bundle/testdata/gpustream/$f"
done
cp "$out/kernels/cuda/samples.fatbin" kernels/cuda/samples.manifest.textproto \
  "$bundle/kernels/"

# glibc's own libraries come from the machine: they must match its
# ld-linux, and glibc is backward compatible (REQUIRES says the minimum).
glibc_re='^(ld-linux-x86-64\.so\.2|lib(c|m|mvec|pthread|dl|rt|resolv|util|anl|BrokenLocale|thread_db)\.so\.[0-9]+|libnss_.*)$'
# libstdc++ and libgcc_s go to lib/cxx: the target (an Ubuntu newer than
# Debian 12) most likely has newer ones, and a newer libstdc++ serves older
# binaries, while ours would break anything in the process that needs the
# newer one (the NVIDIA driver's libraries load into it). run.sh uses ours
# only where the machine's lack a version the binaries need (REQUIRES).
cxx_re='^(libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'

# Every library the dynamic loader resolves for each ELF file we ship (ldd
# on the originals, whose RPATH finds the test's Bazel-built libraries).
declare -A seen=()
for f in "${binaries[@]}" "${fakes[@]}"; do
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" ]] || continue # linux-vdso, ld-linux itself
    [[ "$name" =~ $glibc_re ]] && continue
    if [[ "$path" == "not" ]]; then
      echo "gpu-bundle: $f needs $name, which does not resolve here" >&2
      exit 1
    fi
    [[ -n "${seen[$name]:-}" ]] && continue
    seen[$name]=1
    real="$(readlink -f "$path")"
    if [[ "$name" =~ $cxx_re ]]; then
      cp "$real" "$bundle/lib/cxx/$name"
    elif [[ "$real" == /lib/x86_64-linux-gnu/* || "$real" == /usr/lib/x86_64-linux-gnu/* ]]; then
      cp "$real" "$bundle/lib/$name" # Debian's build: already stripped.
    elif [[ "$real" == "$root"/bazel-out/* || "$real" == */execroot/gpustream/bazel-out/* ]]; then
      copy_stripped "$real" "$bundle/lib/$name"
    else
      echo "gpu-bundle: $f needs $name from $real: not a place this" \
        "script knows to bundle from" >&2
      exit 1
    fi
  done < <(ldd "$out/$f")
done

# The versions the machine must provide: the newest GLIBC_ symbol version
# any shipped file needs, and every libstdc++/libgcc_s version needed by
# anything but those two libraries themselves.
needs() { # file -> "soname version" per line, from .gnu.version_r
  readelf -V --wide "$1" | awk '
    /File: / { for (i = 1; i <= NF; i++) if ($i == "File:") file = $(i + 1) }
    /Name: / && file != "" { for (i = 1; i <= NF; i++) if ($i == "Name:") print file, $(i + 1) }
    /^Version symbols section|^Version definition section/ { file = "" }'
}
mapfile -t shipped < <(find "$bundle/bin" "$bundle/lib" "$bundle/testdata" \
  -type f ! -path "$bundle/lib/cxx/*")
all_needs="$(for f in "${shipped[@]}"; do needs "$f"; done | sort -u)"
glibc_min="$(awk '$2 ~ /^GLIBC_[0-9]/ { sub(/^GLIBC_/, "", $2); print $2 }' <<<"$all_needs" |
  sort -V | tail -n 1)"
{
  echo "# What gpu-bundle needs from the machine (read by run.sh)."
  echo "glibc $glibc_min"
  awk '$1 == "libstdc++.so.6" || $1 == "libgcc_s.so.1"' <<<"$all_needs"
} >"$bundle/REQUIRES"

if commit="$(git rev-parse --short HEAD 2>/dev/null)"; then
  git diff --quiet HEAD 2>/dev/null || commit+=" + uncommitted changes"
else
  commit="unknown (not a git checkout)"
fi
{
  echo "gpustream GPU bundle, commit $commit"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"'), $(getconf GNU_LIBC_VERSION), $(gcc -dumpfullversion 2>/dev/null | sed 's/^/gcc /')"
  echo "CUDA toolkit: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo unknown)"
  echo
  (cd "$bundle" && find . -type f ! -name BUILD_INFO | sort | xargs ls -l |
    awk '{ printf "%10d  %s\n", $5, $9 }')
} >"$bundle/BUILD_INFO"

# run.sh: what runs on the GPU machine. Quoted heredoc: nothing expands here.
cat >"$bundle/run.sh" <<'RUN_SH'
#!/usr/bin/env bash
# gpustream's GPU checks, from the bundle that tools/gpu-bundle.sh made. On a
# machine with an NVIDIA driver (and nothing else: the bundle carries its
# libraries) it runs, each step under a timeout and all within 8 minutes,
# on the backend of the GPU it finds (CUDA, else HIP):
#   1. the Device conformance suite on the real backend (*/cuda or */hip;
#      CUDA also in a tenant context and on an SM partition, the
#      gpu_sharing modes);
#   2. gpustreamd --backend=<it> on a unix socket in a temp folder, with the
#      demo client against it (kernels checked element by element, gated
#      work, a host function, a rejected launch), then SIGTERM;
#   3. gpu_bench against the driver: the daemon against the driver used
#      directly; on CUDA, sharing_bench: two tenants under the gpu_sharing
#      modes (SM shares by weight, fault isolation);
# then prints a summary. Without a usable GPU driver it says so, runs the
# bundle's self-test (the conformance suite on the CPU backend and on the
# bundled fakes) instead, and exits 0.
#
# Environment:
#   GPUSTREAM_BACKEND      cuda or hip (default: CUDA where its driver is
#                          usable, else HIP where its runtime finds a GPU)
#   GPUSTREAM_CUDA_DRIVER  the CUDA driver (default libcuda.so.1); "fake"
#                          for the bundle's fake driver, or a path
#   GPUSTREAM_HIP_RUNTIME  the HIP runtime (default libamdhip64.so.6, then
#                          .so.5); "fake" for the bundle's fake, or a path.
#                          With a fake (a file name starting "libfake") every
#                          step runs on it: CPU emulation, to test the bundle
#                          on a machine without a GPU.
#   OUT                    a folder: receives run.log, each step's log and
#                          summary.txt.
# Exit status: 0 when every step passed (or was skipped for want of a
# driver), 1 when one failed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

# Everything also goes to $OUT/run.log: run again under tee.
if [[ -n "${OUT:-}" && -z "${GPUSTREAM_RUN_TEED:-}" ]]; then
  mkdir -p "$OUT"
  status=0
  GPUSTREAM_RUN_TEED=1 bash "$0" "$@" 2>&1 | tee "$OUT/run.log" || status=$?
  exit "$status"
fi

start=$SECONDS
budget=470 # seconds for all steps: under 8 minutes with room to spare
# The lesser of $1 seconds and what is left of the budget (at least 1).
limit() {
  local left=$((budget - (SECONDS - start)))
  ((left < 1)) && left=1
  echo $(($1 < left ? $1 : left))
}

work="$(mktemp -d "${TMPDIR:-/tmp}/gpustream-run.XXXXXX")"
logs="${OUT:-$work}"
mkdir -p "$logs"
daemon=""
cleanup() {
  if [[ -n "$daemon" ]] && kill -0 "$daemon" 2>/dev/null; then
    kill -KILL "$daemon" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

results=()
failed=0
record() { # verdict, what, seconds
  results+=("$(printf '%-4s  %-58s %4ss' "$1" "$2" "$3")")
  [[ "$1" == FAIL ]] && failed=1
  return 0
}
say() { echo "run.sh: $*"; }

# Copies may lose the executable bits.
chmod +x "$here"/bin/* 2>/dev/null || true

say "$(head -n 1 "$here/BUILD_INFO")"
say "host: $(uname -srm), $(getconf GNU_LIBC_VERSION 2>/dev/null || echo 'glibc unknown')"
if command -v nvidia-smi >/dev/null; then
  say "nvidia-smi: $(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader 2>&1 | head -n 4 | paste -sd ';' || true)"
fi

# glibc: the one library the bundle takes from the machine.
need_glibc="$(awk '$1 == "glibc" { print $2 }' "$here/REQUIRES")"
have_glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')"
if [[ -z "$have_glibc" ]] || ! printf '%s\n' "$need_glibc" "$have_glibc" | sort -V -C; then
  say "FAIL: the binaries need glibc >= $need_glibc; this machine has ${have_glibc:-an unknown one}"
  exit 1
fi

# libstdc++/libgcc_s: the machine's own where they have every version the
# binaries need (a newer one serves older binaries and anything else in the
# process), else the bundle's.
ldconfig="$(command -v ldconfig || echo /sbin/ldconfig)"
# awk reads to the end: an early exit would fail ldconfig with SIGPIPE.
system_lib() { "$ldconfig" -p 2>/dev/null | awk -v n="$1" '$1 == n && /x86-64/ && !found { print $NF; found = 1 }'; }
use_bundled_cxx=""
while read -r soname version; do
  lib="$(system_lib "$soname")"
  if [[ -z "$lib" ]]; then
    use_bundled_cxx="the machine has no $soname"
    break
  elif ! grep -qaF "$version" "$lib"; then
    use_bundled_cxx="$lib lacks $version"
    break
  fi
done < <(awk '$1 == "libstdc++.so.6" || $1 == "libgcc_s.so.1"' "$here/REQUIRES")
libpath="$here/lib"
if [[ -n "$use_bundled_cxx" ]]; then
  libpath="$libpath:$here/lib/cxx"
  say "C++ runtime: the bundle's ($use_bundled_cxx)"
else
  say "C++ runtime: the machine's (it has every version the binaries need)"
fi
# The machine's LD_LIBRARY_PATH stays behind ours: containers often find
# libcuda.so.1 through it.
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Every binary's libraries resolve.
missing="$(for b in "$here"/bin/*; do
  ldd "$b" 2>&1 | awk -v b="${b##*/}" '/not found/ { print b ": " $1 }' || true
done)"
if [[ -n "$missing" ]]; then
  say "FAIL: libraries not found:"
  echo "$missing"
  exit 1
fi

cuda_driver="${GPUSTREAM_CUDA_DRIVER:-libcuda.so.1}"
[[ "$cuda_driver" == fake ]] && cuda_driver="$here/testdata/gpustream/tests/fake_cuda/libfakecuda.so"
hip_runtime="${GPUSTREAM_HIP_RUNTIME:-}"
[[ "$hip_runtime" == fake ]] && hip_runtime="$here/testdata/gpustream/tests/fake_hip/libfakehip.so"
backend="${GPUSTREAM_BACKEND:-}"
case "$backend" in
  "" | cuda | hip) ;;
  *) say "FAIL: GPUSTREAM_BACKEND=$backend: expected cuda or hip"; exit 1 ;;
esac

# The conformance suite's fake cases load
# $TEST_SRCDIR/gpustream/tests/fake_{cuda,hip}/libfake*.so: point them at the
# chosen fakes (or the bundle's), as Bazel's runfiles would.
srcdir="$work/runfiles"
# As the suite's Bazel target sets it: a reset of a faulted context on a
# fake clears its error, so the recovery cases go on (a real driver
# ignores the variable).
export FAKEGPU_RESET_CLEARS_STICKY=1
for f in tests/fake_cuda/libfakecuda.so tests/fake_hip/libfakehip.so; do
  mkdir -p "$srcdir/gpustream/${f%/*}"
  target="$here/testdata/gpustream/$f"
  for lib in "$cuda_driver" "$hip_runtime"; do
    [[ "${lib##*/}" == "${f##*/}" ]] && target="$(readlink -f "$lib")"
  done
  ln -s "$target" "$srcdir/gpustream/$f"
done

# Runs the conformance suite on the cases of $1 (a gtest filter); fails on a
# skipped case (the backend could not be opened) or on none having run.
conformance() {
  local filter="$1" log="$logs/conformance.log" t0=$SECONDS rc=0
  say "conformance suite, --gtest_filter='$filter'"
  TEST_SRCDIR="$srcdir" timeout "$(limit 150)" "$here/bin/device_conformance_test" \
    --gtest_filter="$filter" --gtest_color=no 2>&1 | tee "$log" || rc=$?
  if ((rc != 0)); then
    record FAIL "conformance $filter (exit $rc)" $((SECONDS - t0))
  elif grep -q '^\[  SKIPPED \]' "$log"; then
    record FAIL "conformance $filter: cases skipped (see log)" $((SECONDS - t0))
  elif ! grep -Eq '^\[  PASSED  \] [1-9]' "$log"; then
    record FAIL "conformance $filter: no case ran" $((SECONDS - t0))
  else
    record PASS "conformance $filter: $(grep -Eo '^\[  PASSED  \] [0-9]+ tests?' "$log" | grep -Eo '[0-9]+ tests?')" $((SECONDS - t0))
  fi
}

summary() {
  {
    echo
    echo "==== gpustream GPU bundle: summary ===="
    echo "driver: $driver${fake:+ (FAKE: CPU emulation, not a GPU)}"
    printf '%s\n' "${results[@]}"
    if [[ -f "$logs/gpu_bench.log" ]] && grep -q '^---- summary' "$logs/gpu_bench.log"; then
      echo
      sed -n '/^---- summary/,$p' "$logs/gpu_bench.log"
    fi
    echo "total $((SECONDS - start)) s; $([[ $failed == 0 ]] && echo 'all passed' || echo 'FAILED')"
  } | tee "$logs/summary.txt"
}

# Which GPU is usable here? gpu_bench --probe opens the driver and device 0.
driver_flags() { # the daemon's and gpu_bench's flags for backend $1
  if [[ "$1" == cuda ]]; then
    echo "--cuda_driver=$cuda_driver"
  elif [[ -n "$hip_runtime" ]]; then
    echo "--hip_runtime=$hip_runtime"
  fi
}
t0=$SECONDS
probe=""
for b in ${backend:-cuda hip}; do
  probe_rc=0
  probe="$(timeout "$(limit 30)" "$here/bin/gpu_bench" --probe --backend="$b" \
    $(driver_flags "$b") 2>&1)" || probe_rc=$?
  echo "$probe"
  if ((probe_rc == 0)); then
    backend=$b
    break
  fi
  probe=""
done
if [[ -z "$probe" ]]; then
  say "no usable GPU driver (${backend:-cuda, hip}): GPU checks skipped"
  record SKIP "GPU checks: no usable GPU driver" $((SECONDS - t0))
  say "self-test of the bundle instead (CPU backend, bundled fakes)"
  driver="none"
  conformance '*/cpu:*/cuda_fake:*/cuda_fake_context_per_tenant:*/cuda_fake_sm_partitions:*/hip_fake'
  summary
  say "no GPU driver: GPU checks skipped$([[ $failed == 0 ]] && echo ', self-test passed')"
  exit "$failed"
fi
read -r -a flags <<<"$(driver_flags "$backend")"
if [[ "$backend" == cuda ]]; then
  driver="$cuda_driver"
else
  driver="${hip_runtime:-libamdhip64.so.6 or .so.5}"
fi
fake=""
[[ "${driver##*/}" == libfake* ]] && fake=1
record PASS "driver: ${probe##*gpu_bench: }" $((SECONDS - t0))
[[ -n "$fake" ]] && say "FAKE driver: every figure below is CPU emulation, not a GPU"

# 1. The conformance suite. Its real-GPU cases open the vendor's library by
# name: a driver given by path is found through its folder.
# CUDA's cases include the other gpu_sharing modes.
cases="*/$backend"
[[ -n "$fake" ]] && cases="*/${backend}_fake"
[[ "$backend" == cuda ]] &&
  cases="$cases:${cases}_context_per_tenant:${cases}_sm_partitions"
if [[ "$driver" == */* && -z "$fake" ]]; then
  LD_LIBRARY_PATH="${driver%/*}:$LD_LIBRARY_PATH" conformance "$cases"
else
  conformance "$cases"
fi

# 2. The daemon as a process, with the demo client against it.
t0=$SECONDS
sock="$work/gs.sock"
ready="$work/ready"
say "gpustreamd --backend=$backend on unix:$sock"
"$here/bin/gpustreamd" --backend="$backend" "${flags[@]}" \
  --listen="unix:$sock" --ready_file="$ready" >"$logs/gpustreamd.log" 2>&1 &
daemon=$!
wait_until=$((SECONDS + $(limit 30)))
while [[ ! -s "$ready" ]] && kill -0 "$daemon" 2>/dev/null && ((SECONDS < wait_until)); do
  sleep 0.1
done
if [[ ! -s "$ready" ]]; then
  cat "$logs/gpustreamd.log"
  record FAIL "gpustreamd did not start (log above)" $((SECONDS - t0))
else
  rc=0
  timeout "$(limit 60)" "$here/bin/demo" --target="unix:$sock" 2>&1 | tee "$logs/demo.log" || rc=$?
  if ((rc == 0)); then
    record PASS "gpustreamd --backend=$backend serves: demo client passed" $((SECONDS - t0))
  else
    record FAIL "demo client against gpustreamd (exit $rc)" $((SECONDS - t0))
  fi
fi
# SIGTERM: it must stop cleanly, promptly.
t0=$SECONDS
kill -TERM "$daemon" 2>/dev/null || true
stop_until=$((SECONDS + $(limit 15)))
while kill -0 "$daemon" 2>/dev/null && ((SECONDS < stop_until)); do sleep 0.1; done
if kill -0 "$daemon" 2>/dev/null; then
  kill -KILL "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
  record FAIL "gpustreamd did not stop within 15 s of SIGTERM" $((SECONDS - t0))
else
  rc=0
  wait "$daemon" || rc=$?
  if ((rc == 0)); then
    record PASS "gpustreamd stopped cleanly on SIGTERM" $((SECONDS - t0))
  else
    record FAIL "gpustreamd exit status $rc after SIGTERM" $((SECONDS - t0))
  fi
fi
daemon=""
sed 's/^/  /' "$logs/gpustreamd.log" | head -n 20 || true

# 3. The benchmark.
t0=$SECONDS
rc=0
timeout "$(limit 180)" "$here/bin/gpu_bench" --backend="$backend" "${flags[@]}" 2>&1 |
  tee "$logs/gpu_bench.log" || rc=$?
if ((rc != 0)); then
  record FAIL "gpu_bench (exit $rc)" $((SECONDS - t0))
elif grep -q '^---- summary' "$logs/gpu_bench.log"; then
  record PASS "gpu_bench" $((SECONDS - t0))
else
  record FAIL "gpu_bench printed no summary" $((SECONDS - t0))
fi
if [[ "$backend" == cuda ]]; then
  t0=$SECONDS
  rc=0
  timeout "$(limit 60)" "$here/bin/sharing_bench" --seconds=1 "${flags[@]}" 2>&1 |
    grep -v ' level=' | tee "$logs/sharing_bench.log" || rc=$?
  if ((rc != 0)); then
    record FAIL "sharing_bench (exit $rc)" $((SECONDS - t0))
  elif grep -q 'CONTEXT_PER_TENANT .* 0 errors' "$logs/sharing_bench.log"; then
    record PASS "sharing_bench: $(grep 'SM_PARTITIONS' "$logs/sharing_bench.log" | grep -Eo 'alice:bob [0-9.]+')" $((SECONDS - t0))
  else
    record FAIL "sharing_bench: a tenant context's fault disturbed the other tenant" $((SECONDS - t0))
  fi
fi

summary
exit "$failed"
RUN_SH
chmod +x "$bundle/run.sh"

# The bundle must stand alone: with only its own folders on the library
# path, every non-glibc library of every shipped file resolves inside it.
leaks="$(for f in "$bundle"/bin/* "${fakes[@]/#/$bundle/testdata/gpustream/}"; do
  # The pattern travels in the environment: awk -v would eat its escapes.
  env -i LD_LIBRARY_PATH="$bundle/lib:$bundle/lib/cxx" ldd "$f" |
    RE="$glibc_re" awk -v f="${f##*/}" -v b="$bundle/" \
      '$2 == "=>" && $1 !~ ENVIRON["RE"] && index($3, b) != 1 { print f ": " $1 " => " $3 }'
done)"
if [[ -n "$leaks" ]]; then
  echo "gpu-bundle: libraries that resolve outside the bundle:" >&2
  echo "$leaks" >&2
  exit 1
fi
size="$(du -sb "$bundle" | cut -f1)"
echo "gpu-bundle: $bundle: $((size / 1048576)) MiB ($size bytes)"
if ((size >= 64 << 20)); then
  echo "gpu-bundle: over the 64 MiB limit" >&2
  exit 1
fi
