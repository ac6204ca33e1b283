"""Checks the Grafana dashboard against a real Prometheus that scrapes the
compose suite's gpustreamd: every PromQL expression of
deploy/grafana/gpustream.json must return series while a client works.

    python3 check_dashboard.py DASHBOARD_JSON [PROMETHEUS_URL]
        (default URL: $GPUSTREAM_PROMETHEUS_URL)

Grafana's variables are given the values a user sees by default
($device: every device, $__rate_interval: 30s), and the $device variable's
own query (label_values) must list a device. A client keeps launching
kernels and making unary calls, some of them refused (team-a's token, over
the unix socket), during the queries, so every rate and quantile has
something to show: those expressions must also return a finite, non-zero
value (a panel over a wrong label or metric shows zeros or NaN). Exit
status 0 when every expression passed; each line printed names an
expression, its series and its largest value.
"""

import json
import math
import os
import sys
import threading
import time
import urllib.parse
import urllib.request

import gpustream
from gpustream._proto import pb

VARIABLES = {"$__rate_interval": "30s", "$device": ".*"}


def query(url: str, expr: str):
    """The result of an instant query: a list of series."""
    full = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(full, timeout=10) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def device_values(url: str) -> list:
    """label_values(gpustream_device_memory_total_bytes, device), as
    Grafana asks Prometheus for it."""
    full = f"{url}/api/v1/label/device/values?" + urllib.parse.urlencode(
        {"match[]": "gpustream_device_memory_total_bytes"})
    with urllib.request.urlopen(full, timeout=10) as response:
        return json.load(response).get("data", [])


def expressions(dashboard: dict):
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            yield panel["title"], expr


def work(stop: threading.Event, errors: list) -> None:
    """Launches and synchronizes as team-a until `stop`."""
    try:
        token_file = os.path.join(os.environ["GPUSTREAM_CLIENT_DIR"],
                                  "team-a.token")
        with open(token_file, encoding="ascii") as f:
            token = f.read().strip()
        client = gpustream.connect(os.environ["GPUSTREAM_UNIX_TARGET"],
                                   token=token)
        with client.open_session(client_name="dashboard-check") as session:
            buf = session.allocate(4096)
            queue = session.default_queue
            deadline = time.monotonic() + 120
            while not stop.is_set() and time.monotonic() < deadline:
                for _ in range(50):
                    queue.launch("samples", "fill_u32", 4, 256, buf, 7, 1024)
                queue.synchronize(timeout=30)
                # A unary call that succeeds and one the daemon refuses
                # (NOT_FOUND): the latency and error panels' traffic.
                session._core.unary("QueryQueue", pb.QueryQueueRequest(
                    session_id=session.id, queue_id=queue.id))
                try:
                    session._core.unary("QueryQueue", pb.QueryQueueRequest(
                        session_id=session.id, queue_id=(1 << 62)))
                except gpustream.Error:
                    pass
    except Exception as e:  # pylint: disable=broad-except
        errors.append(e)


def main() -> int:
    dashboard = json.load(open(sys.argv[1], encoding="utf-8"))
    url = (sys.argv[2] if len(sys.argv) > 2 else
           os.environ["GPUSTREAM_PROMETHEUS_URL"]).rstrip("/")
    # Prometheus is up and has scraped the daemon a few times.
    deadline = time.monotonic() + 60
    last = "no answer yet"
    while True:
        try:
            up = query(url, 'count_over_time(up{job="gpustreamd"}[1m])')
            if up and float(up[0]["value"][1]) >= 3 and query(
                    url, 'up{job="gpustreamd"} == 1'):
                break
            last = f"up: {query(url, 'up')}"
        except (OSError, RuntimeError) as e:
            last = repr(e)
        if time.monotonic() > deadline:
            print(f"dashboard: Prometheus never scraped gpustreamd ({last})")
            return 1
        time.sleep(1)
    stop, errors = threading.Event(), []
    worker = threading.Thread(target=work, args=(stop, errors), daemon=True)
    worker.start()
    time.sleep(8)  # Several scrapes while the client works.
    failed = 0
    for title, expr in expressions(dashboard):
        series = query(url, expr)
        values = [float(s["value"][1]) for s in series]
        finite = [v for v in values if math.isfinite(v)]
        largest = max(finite) if finite else float("nan")
        print(f"{len(series):3d} series, largest {largest:g}  {title}: {expr}")
        if not series:
            failed += 1
        elif ("rate(" in expr or "histogram_quantile" in expr) and not any(
                v > 0 for v in finite):
            print("    ^ no finite, non-zero value while the client works")
            failed += 1
    # The $device variable's query (Grafana's label_values).
    devices = device_values(url)
    print(f"{len(devices):3d} values   $device: {devices}")
    if not devices:
        failed += 1
    stop.set()
    worker.join(timeout=60)
    if errors:
        print(f"dashboard: the working client failed: {errors[0]}")
        return 1
    if failed:
        print(f"dashboard: {failed} expression(s) returned no series")
        return 1
    print("dashboard: every expression returned series")
    return 0


if __name__ == "__main__":
    sys.exit(main())
