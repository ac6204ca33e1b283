#!/usr/bin/env python3
"""Proves what a green `bazel test //...` ran: counts every test case that
ran and that skipped, per backend, and fails on a skip that
tools/allowed_skips.txt does not allow on this machine, or when a backend
that must run here ran no case at all.

Bazel reports a skipped case as a pass, so without this a suite whose CUDA
half silently skipped (a device that failed to open, a missing fake driver)
would look as green as one that ran. Reads the GoogleTest logs (every
case) and the Python ones (pytest's and unittest's skip counts: none is
allowed) under bazel-testlogs; with --targets, only the logs of the test
targets that file lists (`bazel query` or `bazel cquery 'tests(//...)'`),
so that the logs of a deleted target prove nothing. --no-cuda-build: the
logs are of a build without CUDA support (--config=nocuda), which runs no
CUDA case even where the toolkit is installed.

    tools/check_skips.py [--no-cuda-build] [--targets FILE] [TESTLOGS]
"""
import ctypes
import os
import re
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT = re.compile(r"^\[\s+(OK|SKIPPED|FAILED)\s+\] (\S+).* \(\d+ ms\)$")
SKIP_MARK = re.compile(r"^\S+:\d+: Skipped$")
PYTEST_SUMMARY = re.compile(r"^=+ (.*) in [\d.]+s")
UNITTEST_SKIPPED = re.compile(r"^OK \(.*skipped=(\d+)")


def cuda_base():
    return os.environ.get("GPUSTREAM_CUDA_PATH", "/usr/local/cuda")


def cuda_toolkit():
    return os.path.exists(os.path.join(cuda_base(), "include", "cuda.h"))


def nvcc():
    return os.access(os.path.join(cuda_base(), "bin", "nvcc"), os.X_OK)


def cuda_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def hip_device():
    """Whether a HIP runtime loads here and finds an AMD GPU (never without
    /dev/kfd, the amdkfd driver ROCm needs)."""
    if not os.path.exists("/dev/kfd"):
        return False
    for name in ("libamdhip64.so.6", "libamdhip64.so.5"):
        try:
            hip = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        return (hip.hipInit(0) == 0 and
                hip.hipGetDeviceCount(ctypes.byref(count)) == 0 and
                count.value > 0)
    return False


def conditions(cuda_build):
    """Which conditions of allowed_skips.txt hold for this build here."""
    held = {"always"}
    if not cuda_build:
        held.add("no-cuda-toolkit")
    if not cuda_build or not nvcc():
        held.add("no-nvcc")
    if not cuda_driver():
        held.add("no-cuda-driver")
    if not hip_device():
        held.add("no-hip-device")
    return held


def allowed_rules():
    rules = []
    with open(os.path.join(ROOT, "tools", "allowed_skips.txt")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            condition, pattern, why = (p.strip() for p in line.split(" | ", 2))
            rules.append((condition, re.compile(pattern), why))
    return rules


def backend_of(case):
    """The backend a parameterized case runs on: its last /-part, up to _."""
    if "/" not in case:
        return "(none)"
    param = case.rsplit("/", 1)[1]
    for b in ("cuda_fake_no_wait_value", "cuda_fake_context_per_tenant",
              "cuda_fake_sm_partitions", "cuda_fake",
              "cuda_context_per_tenant", "cuda_sm_partitions", "cuda",
              "hip_fake", "hip", "cpu"):
        if param == b or param.startswith(b + "_"):
            return b
    return "(none)"


def scan(testlogs, targets=None):
    """(target, case, status, reason) of every case in every test.log of
    `targets` (paths like tests/e2e_test; all when None)."""
    cases = []
    for folder, _, files in os.walk(testlogs):
        if "test.log" not in files:
            continue
        target = os.path.relpath(folder, testlogs)
        # A sharded test's logs are one per shard, under its target's.
        target = re.sub(r"/shard_\d+_of_\d+$", "", target)
        if targets is not None and target not in targets:
            continue
        reason = []
        with open(os.path.join(folder, "test.log"), errors="replace") as f:
            lines = f.read().splitlines()
        for line in lines:
            python = PYTEST_SUMMARY.match(line)
            skipped = re.search(r"(\d+) skipped", python.group(1)) if python \
                else UNITTEST_SKIPPED.match(line)
            if skipped:
                cases.append((target, f"{skipped.group(1)} Python test(s)",
                              "SKIPPED", "see the log"))
                continue
            if SKIP_MARK.match(line):
                reason = []
                continue
            m = RESULT.match(line)
            if m:
                cases.append((target, m.group(2).rstrip(","), m.group(1),
                              " ".join(reason).strip()))
                reason = []
            else:
                reason.append(line.strip())
                del reason[:-3]
    return cases


def read_targets(path):
    """Test labels (//pkg:name, cquery's with a configuration after) as
    testlogs paths (pkg/name)."""
    with open(path) as f:
        return {line.split()[0].lstrip("/").replace(":", "/")
                for line in f if line.strip().startswith("//")}


def main():
    args = sys.argv[1:]
    cuda_build = cuda_toolkit()
    if args[:1] == ["--no-cuda-build"]:
        cuda_build = False
        args = args[1:]
    targets = None
    if args[:1] == ["--targets"]:
        targets = read_targets(args[1])
        args = args[2:]
    testlogs = args[0] if args else "bazel-testlogs"
    if not os.path.isdir(testlogs):
        print(f"check_skips: no {testlogs}", file=sys.stderr)
        return 2
    held = conditions(cuda_build)
    rules = allowed_rules()
    ran, skipped = Counter(), Counter()
    bad = []
    for target, case, status, reason in scan(testlogs, targets):
        backend = backend_of(case)
        if status != "SKIPPED":
            ran[backend] += 1
            continue
        skipped[backend] += 1
        name = f"{target}: {case}"
        if not any(c in held and p.search(name) for c, p, _ in rules):
            bad.append(f"{name} ({reason or 'no reason given'})")
    print("check_skips: cases ran / skipped per backend:")
    for backend in sorted(set(ran) | set(skipped)):
        print(f"  {backend:26} {ran[backend]:6} ran {skipped[backend]:6} "
              "skipped")
    failed = False
    if bad:
        failed = True
        print("check_skips: skips no rule of tools/allowed_skips.txt allows "
              f"here ({', '.join(sorted(held))}):", file=sys.stderr)
        for b in bad:
            print("  " + b, file=sys.stderr)
    sharing = ["context_per_tenant", "sm_partitions"]
    must_run = ["cpu", "hip_fake"] + (
        ["cuda_fake"] + [f"cuda_fake_{s}" for s in sharing]
        if cuda_build else []) + (
        ["cuda"] + [f"cuda_{s}" for s in sharing]
        if cuda_build and cuda_driver() else []) + (
        ["hip"] if hip_device() else [])
    for backend in must_run:
        if ran[backend] == 0:
            failed = True
            print(f"check_skips: no {backend} case ran, but {backend} must "
                  "run on this machine", file=sys.stderr)
    if not cuda_build:
        for backend in [b for b in ran if b.startswith("cuda")]:
            if ran[backend]:
                failed = True
                print(f"check_skips: {ran[backend]} {backend} cases ran in a "
                      "build said to have no CUDA support", file=sys.stderr)
    # The fake drivers' own suites, where the run was to include them (a
    # subset, such as the nocuda phase's, may not: the logs found would be
    # another run's).
    def expected(target):
        return targets is None or target in targets

    if cuda_build and expected("tests/fake_cuda/fake_cuda_hazards_test") and \
            not os.path.exists(os.path.join(
                testlogs, "tests", "fake_cuda", "fake_cuda_hazards_test",
                "test.log")):
        failed = True
        print("check_skips: the CUDA toolkit is here but the fake driver's "
              "tests did not run", file=sys.stderr)
    if expected("server/backend/hip/hip_module_fake_test") and \
            not os.path.exists(os.path.join(
                testlogs, "server", "backend", "hip", "hip_module_fake_test",
                "test.log")):
        failed = True
        print("check_skips: the fake HIP runtime's module tests did not run",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
