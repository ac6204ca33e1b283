#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (README.md, "Fuzzing"), built with
# --config=fuzz (clang-14, ASan + UBSan), each for a while on a copy of its
# checked-in seed corpus (which never grows), and reports the executions of
# each target and their total. Exits non-zero on any crash, leak, timeout or
# broken invariant, keeping the inputs that caused it (their paths are
# printed: copy one into tests/fuzz/corpus/<target>/ as a regression input).
#
#   tools/fuzz.sh [--seconds N] [--parallel P] [--keep] [target...]
#
# --seconds N: per target (default 600). --parallel P: targets run at once
# (default: the number of cores). --keep: keep the work folder (logs, grown
# corpora) even when all went well. Targets: all by default.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=600
parallel=$(nproc)
keep=0
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --seconds=*) seconds=${1#*=}; shift ;;
    --parallel) parallel=$2; shift 2 ;;
    --parallel=*) parallel=${1#*=}; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

if [ ${#targets[@]} -eq 0 ]; then
  # Every fuzz binary this build has (the CUDA one only with a toolkit), and
  # it must be every one there is: a target the query misses is a phase
  # that proves less than it says.
  found=$(bazel query --output=label \
    'attr(name, "_fuzzer$", kind("cc_binary", //tests/fuzz:all))') ||
    { echo "fuzz.sh: bazel query for the fuzz targets failed" >&2; exit 2; }
  mapfile -t targets < <(sed 's|.*:||' <<<"$found" | sort)
  expected=(amd_code_object_fuzzer cpu_module_fuzzer module_manifest_fuzzer
            server_config_fuzzer session_commands_fuzzer
            session_commands_hip_fake_fuzzer)
  if [ -f "${GPUSTREAM_CUDA_PATH:-/usr/local/cuda}/include/cuda.h" ]; then
    expected+=(session_commands_cuda_fake_fuzzer)
  fi
  mapfile -t expected < <(printf '%s\n' "${expected[@]}" | sort)
  if [ "${targets[*]}" != "${expected[*]}" ]; then
    echo "fuzz.sh: fuzz targets found: ${targets[*]:-none}; expected:" \
      "${expected[*]}" >&2
    exit 2
  fi
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz.sh: no fuzz targets" >&2; exit 2; }

labels=()
for t in "${targets[@]}"; do labels+=("//tests/fuzz:$t"); done
bazel build --config=fuzz "${labels[@]}"
bin=$(bazel info --config=fuzz bazel-bin 2>/dev/null)/tests/fuzz

# The GPU targets replay and grow the CPU target's corpus: the same bytes
# decode to the same commands.
corpus_of() {
  case $1 in
    session_commands_cuda_fake_fuzzer | session_commands_hip_fake_fuzzer)
      echo session_commands_fuzzer ;;
    *) echo "$1" ;;
  esac
}

work=$(mktemp -d "${TMPDIR:-/tmp}/gs-fuzz.XXXXXX")
# Per-input leak checks on the session targets: LSan would scan, after
# every input, a heap that the daemon's threads are still changing, at a
# quarter of the speed; their invariant (memory and object counters back to
# zero after each session) covers what the daemon holds, and LSan still
# checks at exit (and in the corpus tests under --config=asan).
leak_flags() {
  case $1 in
    session_commands_*) echo -detect_leaks=0 ;;
    *) echo -detect_leaks=1 ;;
  esac
}

# LeakSanitizer's exit-time scan crashes ("Tracer caught signal 11") while
# the fake driver's stream threads are alive; those targets' leaks are
# their counters invariant's to find.
asan_options() {
  case $1 in
    session_commands_cuda_fake_fuzzer | session_commands_hip_fake_fuzzer)
      echo detect_leaks=0 ;;
    *) echo "${ASAN_OPTIONS:-}" ;;
  esac
}

run_one() {  # run_one TARGET: fuzzes it for $seconds; its log in $work.
  local t=$1 dir=$work/$1
  mkdir -p "$dir/corpus" "$dir/crashes" || return 3
  # Explicit: the caller's `||` turns errexit off in here.
  cp "tests/fuzz/corpus/$(corpus_of "$t")"/* "$dir/corpus/" || {
    echo "fuzz.sh: $t: cannot copy its seed corpus" >"$dir/log"
    return 3
  }
  # -timeout: one input far past its few milliseconds is a hang.
  (cd "$dir" && ASAN_OPTIONS=$(asan_options "$t") exec "$bin/$t" -max_total_time="$seconds" -timeout=60 \
    -rss_limit_mb=4096 -max_len=4096 -print_final_stats=1 "$(leak_flags "$t")" \
    -artifact_prefix="$dir/crashes/" corpus) >"$dir/log" 2>&1
}

echo "fuzz.sh: ${#targets[@]} targets, ${seconds} s each, $parallel at a time; work in $work" >&2
declare -A status
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$parallel" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  { rc=0; run_one "$t" || rc=$?; echo "$rc" >"$work/$t.rc"; } &
  running=$((running + 1))
done
wait || true

failed=0
total=0
printf '%-36s %14s %10s  %s\n' target executions execs/s result
for t in "${targets[@]}"; do
  log=$work/$t/log
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rc=$(cat "$work/$t.rc" 2>/dev/null || echo 1)
  crashes=$(find "$work/$t/crashes" -type f | wc -l)
  result=ok
  if [ "$rc" != 0 ] || [ "$crashes" -gt 0 ] || [ -z "$execs" ]; then
    result="FAILED (exit $rc, $crashes inputs kept in $work/$t/crashes, log $log)"
    failed=1
  fi
  total=$((total + ${execs:-0}))
  printf '%-36s %14s %10s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$result"
done
printf '%-36s %14s\n' total "$total"

if [ "$failed" -ne 0 ]; then
  for t in "${targets[@]}"; do
    if [ -n "$(find "$work/$t/crashes" -type f)" ] || [ "$(cat "$work/$t.rc")" != 0 ]; then
      echo "--- $t: end of $work/$t/log" >&2
      tail -40 "$work/$t/log" >&2
    fi
  done
  echo "fuzz.sh: FAILED; work folder kept: $work" >&2
  exit 1
fi
if [ "$keep" -eq 1 ]; then
  echo "fuzz.sh: work folder kept: $work" >&2
else
  rm -rf "$work"
fi
