"""Scrapes gpustreamd's Prometheus endpoint from the client container and
checks it against the work the compose suite did before (demos, pytest).

    python3 check_metrics.py [URL]     (default: $GPUSTREAM_METRICS_URL)

Parses with prometheus_client's own text parser, so a format error fails
too. Exit status 0 when every expectation holds; each line printed names
one expectation and the value found. The metric names and labels the suite
relies on are all in EXPECTATIONS, and nowhere else.
"""

import operator
import os
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from leaks import leaked_tokens

# (family, type, labels the samples must carry, comparison, value). The
# parser names a counter's family without its "_total" suffix. Matching
# samples are summed, so a label left out means "any value".
EXPECTATIONS = [
    ("gpustream_build_info", "gauge", {}, "==", 1),
    # Every client opened sessions; a rejected token is counted with its code.
    ("gpustream_rpc_requests", "counter",
     {"service": "gpustream.v1.GpuStream", "method": "OpenSession",
      "code": "OK"}, ">", 0),
    ("gpustream_rpc_requests", "counter", {"code": "UNAUTHENTICATED"}, ">", 0),
    ("gpustream_rpc_requests", "counter",
     {"service": "gpustream.v1.Admin", "code": "PERMISSION_DENIED"}, ">", 0),
    ("gpustream_submit_streams", "counter", {}, ">", 0),
    # The demos and tests ran kernels as team-a (token) and team-b (mTLS).
    ("gpustream_tenant_commands_completed", "counter", {"tenant": "team-a"},
     ">", 0),
    ("gpustream_tenant_commands_completed", "counter", {"tenant": "team-b"},
     ">", 0),
    ("gpustream_tenant_weight", "gauge", {"tenant": "team-a"}, "==", 2),
]

_OPS = {">": operator.gt, ">=": operator.ge, "==": operator.eq}


def scrape(url: str, attempts: int = 10) -> str:
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.read().decode()
        except OSError as error:
            if attempt == attempts - 1:
                raise SystemExit(f"metrics: cannot scrape {url}: {error}")
            time.sleep(1)
    raise AssertionError("unreachable")


def check(text: str) -> list:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    failures = []
    for name, kind, labels, op, want in EXPECTATIONS:
        family = families.get(name)
        what = f"{name}{labels} {op} {want}"
        if family is None:
            failures.append(f"{what}: no such metric family")
            continue
        if family.type != kind:
            failures.append(f"{what}: type {family.type}, want {kind}")
            continue
        sample_name = name + "_total" if kind == "counter" else name
        samples = [s for s in family.samples if s.name == sample_name and
                   all(s.labels.get(k) == v for k, v in labels.items())]
        value = sum(s.value for s in samples)
        ok = bool(samples) and _OPS[op](value, want)
        print(f"metrics: {'ok  ' if ok else 'FAIL'} {what}: {value:g} "
              f"({len(samples)} series)")
        if not ok:
            failures.append(f"{what}: got {value:g}")
    return failures


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ[
        "GPUSTREAM_METRICS_URL"]
    text = scrape(url)
    failures = check(text)
    # Secrets never reach the scrape: no token appears in it.
    client_dir = os.environ.get("GPUSTREAM_CLIENT_DIR", "")
    if client_dir:
        for name in leaked_tokens(text, client_dir):
            failures.append(f"the token in {name} appears in the scrape")
    if failures:
        print("metrics: FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)
    print(f"metrics: all {len(EXPECTATIONS)} expectations hold")


if __name__ == "__main__":
    main()
