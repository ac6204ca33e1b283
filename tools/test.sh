#!/usr/bin/env bash
# Every test: installs what is missing, runs the whole suite (CPU backend and
# CUDA backend over the fake driver; real-GPU cases run where a GPU is),
# with the C++ client installed and built out of tree and every code
# snippet of README.md and docs/ compiled,
# then the docker-compose integration suite with the binaries just built,
# then the short soak (load, kill storms, misbehaving clients, drain) against
# those binaries, then the suite again under AddressSanitizer +
# UndefinedBehaviorSanitizer and under ThreadSanitizer, then each fuzz
# target for 15 seconds, then the build and the suites that change as they
# are on a machine without a CUDA toolkit. docs/testing.md says what each
# phase proves.
set -euo pipefail
cd "$(dirname "$0")/.."

phase() {  # phase NAME COMMAND...: runs it and says how long it took.
  local name=$1 started=$SECONDS
  shift
  "$@"
  echo "test.sh: $name passed in $((SECONDS - started)) s" >&2
}

started=$SECONDS
bash tools/setup.sh
# Where a real CUDA driver is, its cases run every time: a cached pass from
# another machine (or from before the GPU was there) proves nothing.
gpu_flags=()
if python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then
  gpu_flags=(--nocache_test_results)
fi
# Bazel reports a skipped case as a pass: after each run of the suite, prove
# what it ran, per backend (bazel-testlogs is the last run's logs).
# SKIP_CHECK_TARGETS: the tests that run just ran (a query expression).
skip_check() {  # skip_check [--no-cuda-build] BAZEL_FLAGS...
  local flags=() targets
  if [[ ${1-} == --no-cuda-build ]]; then
    flags=(--no-cuda-build)
    shift
  fi
  targets=$(mktemp)
  bazel cquery "$@" "tests(${SKIP_CHECK_TARGETS:-//...}) except attr(tags, manual, //...)" >"$targets"
  python3 tools/check_skips.py "${flags[@]}" --targets "$targets" bazel-testlogs
  rm -f "$targets"
}
phase "bazel test" bazel test "${gpu_flags[@]}" //... //client:install_test \
  //tests/docs:doc_snippets_test
phase "skip check" skip_check
phase "compose suite" bash tools/compose-test.sh
phase "soak (short)" bash tools/soak.sh --short
# The sanitizer phases build what the tests need (--build_tests_only): the
# benches, fuzz drivers and examples were built in phase one, and a second
# instrumented build of them proves nothing.
phase "bazel test --config=asan" bazel test "${gpu_flags[@]}" --config=asan \
  --build_tests_only //...
phase "skip check (asan)" skip_check --config=asan
# Not the suites tagged no_tsan (the test command's time on two cores):
# single-threaded parsers and formatting, and the Python client's suite,
# whose daemon paths the C++ end-to-end suites run here. Their BUILD
# rules say why; they run in the default and ASan phases.
phase "bazel test --config=tsan" bazel test "${gpu_flags[@]}" --config=tsan \
  --build_tests_only --test_tag_filters=-no_tsan //...
SKIP_CHECK_TARGETS="//... except attr(tags, no_tsan, //...)" \
  phase "skip check (tsan)" skip_check --config=tsan
# The seven fuzz targets, four at a time, 15 seconds each (the phase must
# fit the test command's time on two cores; tools/fuzz.sh alone fuzzes
# longer).
phase "fuzz (short)" bash tools/fuzz.sh --seconds 15 --parallel 4
# The build without a CUDA toolkit: everything builds, and the suites whose
# backends or outcomes change without it run (the backend factory, the
# suites that list the backends a build has, the conformance suites, the
# fuzz corpus per fake driver, and the daemon's memory after a crowd, whose
# make-up changes without the CUDA backend). The rest drive the CPU and HIP
# backends through the same code as in phase one.
nocuda_tests=(//server/backend:backend_factory_test //tests:e2e_test
  //tests:ordering_test //tests:gpu_sharing_test //tests/conformance:all
  //tests:crash_reclaim_test
  //tests/fuzz:session_commands_fuzzer_corpus_test
  //tests/fuzz:session_commands_hip_fake_fuzzer_corpus_test)
phase "bazel build --config=nocuda" bazel build --config=nocuda //...
phase "bazel test --config=nocuda" bazel test --config=nocuda \
  "${nocuda_tests[@]}"
SKIP_CHECK_TARGETS="set(${nocuda_tests[*]})" \
  phase "skip check (nocuda)" skip_check --no-cuda-build --config=nocuda
echo "test.sh: everything passed in $((SECONDS - started)) s" >&2
