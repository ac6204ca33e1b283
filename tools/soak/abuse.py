#!/usr/bin/python3
"""Soak phase "abuse": misbehaving clients against one gpustreamd.

A well-behaved client (its own process: unary LaunchKernel(noop) +
SynchronizeQueue on the unix socket, in a loop) measures latency while
misbehaving clients run, one kind after another, each bounded in count and
time:

  bc  raw connections (TCP and unix) that connect and never send; that send
      part of the HTTP/2 preface; the preface and half a frame; the preface
      and half a gRPC message; and many streams with half a message each on
      one connection. They are kept open (never read, never answering a
      PING) until the end, to check that the daemon closes them itself
      (keepalive: 30 s ping + 10 s timeout; asserted within 55 s of each
      connection's accept, the longest measured is printed).
  a   clients (processes, under nice -n 19) that open a Submit stream and a
      WatchNotifications stream, issue many read_buffer commands of large
      buffers and host functions, and never read a response. Asserted real:
      the daemon's metrics show their Submit and notification streams open
      (baseline + N each) and its VmRSS rises by at least half of
      N x max_pending_result_bytes (the pending cap reached), within 40 s.
  d   thousands of connections: 2,000 long ones (HTTP/2 preface + SETTINGS,
      then idle) and a few hundred short gRPC channels that each make one
      call and close.

During each, the daemon's VmRSS and Threads are sampled from /proc and the
good client's p50/p99 are compared with the baseline. Bounds (asserted):

  threads  <= baseline + 16 (no thread per connection or per stream);
  memory   a:  baseline + N x (max_pending_result_bytes + 4 MiB other
                results + 16 MiB transport buffers) + 64 MiB, the Submit
                stream's documented bounds (docs/api.md "Stream bounds");
           bc, d: baseline + connections x 128 KiB + 64 MiB (a connection
                holds at most its 64 KiB HTTP/2 window of unread input plus
                its transport's buffers);
  latency  p50 <= 3 x baseline p50 + 2 ms and p99 <= 10 x baseline p99 +
           10 ms (the abusers' own processes share the machine's cores);
  after    the abusers gone: sessions, Submit and notification streams and
           device memory back to the baseline's (metrics), threads within
           baseline + 16, every raw connection closed by the daemon within
           55 s of its accept, and no round of (a) peaking 10% + 32 MiB above the first (no
           leak);
  rss back after each round of (a), once its non-readers are dead and the
           sessions and streams are back to the baseline: VmRSS <= its value
           before the first round + 64 MiB within 5 s (the daemon sets
           M_MMAP_THRESHOLD to 1 MiB, so freed 4 MiB result buffers go back
           to the system instead of staying in glibc's heap);
  settings a raw connection that sends the client preface and an empty
           SETTINGS frame gets the server's SETTINGS frame first, with
           SETTINGS_MAX_CONCURRENT_STREAMS (0x3) = 1024 (kMaxStreamsPerConnection
           in server/rpc/grpc_server.h), on TCP and on the unix socket.

Usage: /usr/bin/python3 tools/soak/abuse.py [--short] [--no_build]
"""

import argparse
import json
import os
import re
import resource
import select
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gsd as D  # noqa: E402

MIB = 1 << 20
KIB = 1 << 10

# ------------------------------------------------------------- raw HTTP/2 --

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, stream_id, payload, length=None):
    n = len(payload) if length is None else length
    return (struct.pack(">I", n)[1:] + bytes([ftype, flags]) +
            struct.pack(">I", stream_id) + payload)


def _literal(name, value):  # HPACK literal without indexing, new name
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


HEADERS = b"".join(_literal(k, v) for k, v in [
    (b":method", b"POST"), (b":scheme", b"http"),
    (b":path", b"/gpustream.v1.GpuStream/GetVersion"),
    (b":authority", b"localhost"), (b"content-type", b"application/grpc"),
    (b"te", b"trailers")])
SETTINGS = frame(4, 0, 0, b"")
END_HEADERS = 4
SETTINGS_NAMES = {1: "HEADER_TABLE_SIZE", 2: "ENABLE_PUSH",
                  3: "MAX_CONCURRENT_STREAMS", 4: "INITIAL_WINDOW_SIZE",
                  5: "MAX_FRAME_SIZE", 6: "MAX_HEADER_LIST_SIZE"}
MAX_CONCURRENT_STREAMS = 3
EXPECTED_MAX_STREAMS = 1024  # kMaxStreamsPerConnection, server/rpc/grpc_server.h
MAX_RSS_GROWTH_AFTER_A = 64 * MIB  # VmRSS after (a) vs before it
RSS_BACK_WAIT_S = 5.0
# A stalled raw connection must be closed by the daemon within this of its
# accept: keepalive ping after 30 s + 10 s ping timeout + 15 s of slack for
# a loaded 2-core machine (timers late, the watch thread's polling).
KEEPALIVE_CLOSE_S = 30 + 10 + 15
# (a) must really fill the daemon: its VmRSS rises by at least this share
# of non-readers x max_pending_result_bytes, within A_FILL_WAIT_S.
A_MIN_FILL_SHARE = 0.5
A_FILL_WAIT_S = 40.0
# Abuser processes run at the lowest priority, so on a small machine they
# do not starve the daemon or the good client of CPU.
ABUSER_NICE = 19


def server_settings(daemon, unix, timeout_s=5.0):
    """Sends the client preface and an empty SETTINGS frame on a raw
    connection and reads (bounded by timeout_s) until the server's first
    frame is whole. Returns ({id: value} of that frame, None) or (None, why).
    The server's connection preface must be a non-ACK SETTINGS frame on
    stream 0 (RFC 9113 3.4); anything else is reported."""
    deadline = time.monotonic() + timeout_s
    fam = socket.AF_UNIX if unix else socket.AF_INET
    addr = daemon.sock_path if unix else ("127.0.0.1", daemon.port)
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(addr)
            s.sendall(PREFACE + SETTINGS)
            buf = b""
            while True:
                if len(buf) >= 9:
                    n = int.from_bytes(buf[:3], "big")
                    if len(buf) >= 9 + n:
                        break
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, f"no whole frame in {timeout_s} s ({len(buf)} bytes)"
                s.settimeout(left)
                chunk = s.recv(65536)
                if not chunk:
                    return None, f"connection closed after {len(buf)} bytes"
                buf += chunk
        except (OSError, socket.timeout) as e:
            return None, f"{type(e).__name__}: {e}"
    n = int.from_bytes(buf[:3], "big")
    ftype, flags = buf[3], buf[4]
    sid = struct.unpack(">I", buf[5:9])[0] & 0x7FFFFFFF
    if ftype != 4 or flags & 1 or sid != 0 or n % 6:
        return None, (f"first frame is type {ftype} flags {flags:#x} stream {sid} "
                      f"length {n}, not the server's SETTINGS")
    payload = buf[9:9 + n]
    settings = {}
    for i in range(0, n, 6):
        ident, value = struct.unpack(">HI", payload[i:i + 6])
        settings[ident] = value
    return settings, None


def half_frame():
    """Preface, SETTINGS, a call's HEADERS, and a DATA frame announcing
    1,005 bytes of which 105 come."""
    return (PREFACE + SETTINGS + frame(1, END_HEADERS, 1, HEADERS) +
            frame(0, 0, 1, b"\x00\x00\x00\x03\xe8" + b"x" * 100, length=1005))


def half_message(data_bytes=60000):
    """A whole DATA frame holding the first `data_bytes` of a gRPC message
    announced as 4 MiB (within the 64 KiB initial window)."""
    return (PREFACE + SETTINGS + frame(1, END_HEADERS, 1, HEADERS) +
            frame(0, 0, 1, struct.pack(">BI", 0, 4 * MIB) + b"x" * data_bytes))


def many_half_streams(streams=200, data_bytes=200):
    out = [PREFACE, SETTINGS]
    for i in range(streams):
        sid = 2 * i + 1
        out.append(frame(1, END_HEADERS, sid, HEADERS))
        out.append(frame(0, 0, sid, struct.pack(">BI", 0, 1 * MIB) +
                         b"x" * data_bytes))
    return b"".join(out)


class RawConnections:
    """Raw sockets that are never read; a poll thread notes when the peer
    (the daemon) closes each one (POLLRDHUP fires with unread data)."""

    def __init__(self):
        self.socks = {}    # fd -> (socket, kind, opened_at)
        self.closed = {}   # fd -> seconds open
        self.lock = threading.Lock()
        self.failed_connects = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def open(self, kind, daemon, unix, payload=b""):
        try:
            if unix:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(daemon.sock_path)
            else:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.connect(("127.0.0.1", daemon.port))
            opened_at = time.monotonic()  # accepted (in the backlog) by now
            if payload:
                s.sendall(payload)
            s.setblocking(False)
        except OSError:
            self.failed_connects += 1
            return
        with self.lock:
            self.socks[s.fileno()] = (s, kind, opened_at)

    def _watch(self):
        while not self.stop.is_set():
            with self.lock:
                fds = [fd for fd in self.socks if fd not in self.closed]
            if not fds:
                time.sleep(0.2)
                continue
            p = select.poll()
            for fd in fds:
                p.register(fd, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
            now = time.monotonic()
            for fd, ev in p.poll(200):
                with self.lock:
                    if fd in self.socks and fd not in self.closed:
                        self.closed[fd] = now - self.socks[fd][2]
            time.sleep(0.1)

    def open_count(self, kinds=None):
        with self.lock:
            return sum(1 for fd, (_, k, _) in self.socks.items()
                       if fd not in self.closed and (kinds is None or k in kinds))

    def close(self, kinds):
        with self.lock:
            for fd in [fd for fd, (_, k, _) in self.socks.items() if k in kinds]:
                s = self.socks.pop(fd)[0]
                self.closed.pop(fd, None)
                s.close()

    def last_opened(self, kinds):
        with self.lock:
            return max((t for _, k, t in self.socks.values() if k in kinds),
                       default=time.monotonic())

    def summary(self, kinds):
        """(total, closed by the daemon, longest seconds open before that)."""
        with self.lock:
            mine = [fd for fd, (_, k, _) in self.socks.items() if k in kinds]
            closed = [self.closed[fd] for fd in mine if fd in self.closed]
        return len(mine), len(closed), max(closed, default=0.0)

    def close_all(self):
        self.stop.set()
        with self.lock:
            for s, _, _ in self.socks.values():
                s.close()
            self.socks.clear()


# ------------------------------------------------------ child processes --

def run_probe(args):
    """The well-behaved client: writes "t latency_s" lines to args.out."""
    import grpc
    pb, rpc = D.stubs(args.tmp)
    ch = grpc.insecure_channel(args.target)
    gs = rpc.GpuStreamStub(ch)
    s = gs.OpenSession(pb.OpenSessionRequest(client_name="probe"), timeout=10)
    launch = pb.LaunchKernelRequest(
        session_id=s.session_id, queue_id=s.default_queue_id, module="samples",
        kernel="noop", grid=pb.Dim3(x=1), block=pb.Dim3(x=1))
    sync = pb.SynchronizeQueueRequest(session_id=s.session_id,
                                      queue_id=s.default_queue_id)
    end = time.monotonic() + args.max_seconds
    with open(args.out, "w", buffering=1) as out:
        while time.monotonic() < end:
            t = time.monotonic()
            try:
                gs.LaunchKernel(launch, timeout=5)
                gs.SynchronizeQueue(sync, timeout=5)
                out.write(f"{t:.6f} {time.monotonic() - t:.6f}\n")
            except grpc.RpcError as e:
                out.write(f"{t:.6f} ERR {e.code().name}\n")
            time.sleep(0.003)


def run_nonreader(args):
    """Opens a session, a Submit and a WatchNotifications stream, sends many
    big reads and host functions, and never reads a response."""
    import grpc
    pb, rpc = D.stubs(args.tmp)
    ch = grpc.insecure_channel(args.target, options=[
        ("grpc.max_receive_message_length", -1)])
    gs = rpc.GpuStreamStub(ch)
    s = gs.OpenSession(pb.OpenSessionRequest(client_name="nonreader",
                                             lease_seconds=args.lease), timeout=10)
    sid, q = s.session_id, s.default_queue_id
    gs.AllocateBuffer(pb.AllocateBufferRequest(session_id=sid, id=1,
                                               size_bytes=args.read_bytes), timeout=10)
    notes = gs.WatchNotifications(pb.WatchNotificationsRequest(session_id=sid),
                                  timeout=args.max_seconds)  # never iterated
    end = time.monotonic() + args.max_seconds
    sent = {"reads": 0}

    def requests():
        seq = 0
        yield pb.SubmitRequest(session_id=sid)
        for _ in range(args.batches):
            if time.monotonic() > end:
                return
            cmds = []
            for _ in range(50):
                seq += 1
                cmds.append(pb.Command(seq=seq, enqueue_host_func=pb.EnqueueHostFuncRequest(
                    queue_id=q, callback_id=seq)))
            for _ in range(4):
                seq += 1
                cmds.append(pb.Command(seq=seq, read_buffer=pb.ReadBufferRequest(
                    queue_id=q, buffer_id=1, size=args.read_bytes)))
                sent["reads"] += 1
            yield pb.SubmitRequest(commands=cmds)
            time.sleep(0.005)
        while time.monotonic() < end:  # keep the stream open, unread
            time.sleep(0.2)

    call = gs.Submit(requests(), timeout=args.max_seconds)  # never iterated
    open(args.out, "w").write("ready\n")
    while time.monotonic() < end:
        time.sleep(0.2)
    call.cancel()
    notes.cancel()


# ------------------------------------------------------------ coordinator --

class Sampler:
    """Samples the daemon's VmRSS, Threads and open fds every 0.1 s."""

    def __init__(self, pid):
        self.pid = pid
        self.samples = []  # (t, rss, threads, fds)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            rss, threads = D.proc_status(self.pid)
            self.samples.append((time.monotonic(), rss, threads, D.open_fds(self.pid)))
            time.sleep(0.1)

    def window(self, t0, t1):
        w = [s for s in self.samples if t0 <= s[0] <= t1]
        return {"rss_peak": max((s[1] for s in w), default=0),
                "threads_peak": max((s[2] for s in w), default=0),
                "fds_peak": max((s[3] for s in w), default=0),
                "rss_last": w[-1][1] if w else 0,
                "threads_last": w[-1][2] if w else 0}


def probe_window(path, t0, t1):
    lat, errors = [], 0
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 2 and len(parts) != 3:
                continue
            t = float(parts[0])
            if not t0 <= t <= t1:
                continue
            if parts[1] == "ERR":
                errors += 1
            else:
                lat.append(float(parts[1]))
    return {"n": len(lat), "errors": errors,
            "p50_ms": D.percentile(lat, 50) * 1e3,
            "p99_ms": D.percentile(lat, 99) * 1e3}


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                  timeout=5).read().decode()

    def value(pattern):
        total = 0.0
        for line in text.splitlines():
            if re.match(pattern, line):
                total += float(line.split()[-1])
        return total
    return {"sessions": value(r"gpustream_tenant_sessions\{"),
            "submit_streams": value(r"gpustream_submit_streams_open "),
            "notification_streams": value(r"gpustream_notification_streams_open "),
            "device_memory": value(r"gpustream_device_memory_used_bytes\{")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--short", action="store_true", help="the CI version (<= ~60 s)")
    ap.add_argument("--no_build", action="store_true",
                    help="use the built daemon as it is (no bazel build)")
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--nonreader", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tmp"), ap.add_argument("--target"), ap.add_argument("--out")
    ap.add_argument("--max_seconds", type=float, default=60)
    ap.add_argument("--read_bytes", type=int, default=4 * MIB)
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--lease", type=int, default=3)
    args = ap.parse_args()
    if args.probe:
        return run_probe(args)
    if args.nonreader:
        return run_nonreader(args)

    D.install_signal_cleanup()
    D.build_daemon(skip=args.no_build)
    short = args.short
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    long_conns = min(2000 if short else 4000, soft - 600)
    short_conns = 300 if short else 1000
    nonreaders = 3 if short else 4
    pending_limit = (64 if short else 256) * MIB
    a_rounds = 2 if short else 3
    baseline_s, phase_s = (3.0, 6.0) if short else (10.0, 20.0)

    tmp = tempfile.mkdtemp(prefix="gs-abuse-")
    pb, rpc = D.stubs(tmp)
    metrics_port = D.free_port()
    config = f"limits {{ max_pending_result_bytes: {pending_limit} }}\n"
    daemon = D.Daemon(tmp, extra_flags=[f"--metrics_listen=127.0.0.1:{metrics_port}"],
                      config_text=config).start()
    sampler = Sampler(daemon.pid)
    probe_out = os.path.join(tmp, "probe.txt")
    total_s = 600 if not short else 120
    D.spawn([sys.executable, __file__, "--probe", "--tmp", tmp, "--target",
             daemon.unix, "--out", probe_out, "--max_seconds", str(total_s)])
    failures, figures = [], {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not os.path.exists(probe_out) or
                                           os.path.getsize(probe_out) < 200):
        time.sleep(0.1)
    time.sleep(0.5)  # warm-up out of the baseline

    def phase(name, t0, t1, mem_bound=None):
        m = sampler.window(t0, t1)
        lat = probe_window(probe_out, t0, t1)
        fig = {"rss_peak_mib": round(m["rss_peak"] / MIB, 1),
               "threads_peak": m["threads_peak"], "fds_peak": m["fds_peak"],
               "p50_ms": round(lat["p50_ms"], 3), "p99_ms": round(lat["p99_ms"], 3),
               "probe_calls": lat["n"], "probe_errors": lat["errors"],
               "load_avg": round(os.getloadavg()[0], 1)}
        if mem_bound is not None:
            fig["rss_bound_mib"] = round(mem_bound / MIB, 1)
        figures[name] = fig
        print(f"   {name}: {json.dumps(fig)}", flush=True)
        if name == "baseline":
            return fig
        base = figures["baseline"]
        if lat["errors"]:
            failures.append(f"{name}: the good client got {lat['errors']} errors")
        if lat["n"] < 10:
            failures.append(f"{name}: the good client made only {lat['n']} calls")
        if lat["p50_ms"] > 3 * base["p50_ms"] + 2:
            failures.append(f"{name}: p50 {lat['p50_ms']:.2f} ms > 3 x baseline "
                            f"{base['p50_ms']:.2f} ms + 2 ms")
        if lat["p99_ms"] > 10 * base["p99_ms"] + 10:
            failures.append(f"{name}: p99 {lat['p99_ms']:.2f} ms > 10 x baseline "
                            f"{base['p99_ms']:.2f} ms + 10 ms")
        if m["threads_peak"] > base["threads_peak"] + 16:
            failures.append(f"{name}: {m['threads_peak']} threads > baseline "
                            f"{base['threads_peak']} + 16")
        if mem_bound is not None and m["rss_peak"] > mem_bound:
            failures.append(f"{name}: VmRSS peak {m['rss_peak'] / MIB:.1f} MiB > "
                            f"bound {mem_bound / MIB:.1f} MiB")
        return fig

    try:
        # Baseline.
        t0 = time.monotonic()
        print(f"== baseline ({baseline_s:.0f} s)", flush=True)
        time.sleep(baseline_s)
        phase("baseline", t0, time.monotonic())
        base_rss = sampler.window(t0, time.monotonic())["rss_peak"]
        base_threads = figures["baseline"]["threads_peak"]
        base_metrics = scrape(metrics_port)

        def wait_baseline(limit_s):
            """Seconds until sessions, streams and device memory are the
            baseline's again, or None."""
            t0 = time.monotonic()
            while time.monotonic() < t0 + limit_s:
                if scrape(metrics_port) == base_metrics:
                    return round(time.monotonic() - t0, 1)
                time.sleep(0.25)
            return None

        # The server's SETTINGS: MAX_CONCURRENT_STREAMS exactly 1024.
        print("== settings: the server's SETTINGS frame on a raw connection "
              "(TCP and unix)", flush=True)
        for listener, unix in (("tcp", False), ("unix", True)):
            got, why = server_settings(daemon, unix)
            named = None if got is None else {
                SETTINGS_NAMES.get(k, hex(k)): v for k, v in sorted(got.items())}
            figures[f"settings_{listener}"] = named if got is not None else why
            print(f"   settings_{listener}: {json.dumps(figures[f'settings_{listener}'])}",
                  flush=True)
            if got is None:
                failures.append(f"settings ({listener}): {why}")
            elif got.get(MAX_CONCURRENT_STREAMS) != EXPECTED_MAX_STREAMS:
                failures.append(
                    f"settings ({listener}): SETTINGS_MAX_CONCURRENT_STREAMS is "
                    f"{got.get(MAX_CONCURRENT_STREAMS, 'absent')}, want "
                    f"{EXPECTED_MAX_STREAMS}: {named}")

        # (b) + (c): raw connections that never send / stall mid-message.
        raw = RawConnections()
        n_b = 100 if short else 300
        n_c = 50 if short else 150
        n_multi = 10 if short else 30
        print(f"== bc: {2 * n_b} never-sending connections, {4 * n_c} stalled "
              f"mid-preface/frame/message, {n_multi} with 200 half-sent streams "
              f"each ({phase_s:.0f} s)", flush=True)
        t0 = time.monotonic()
        for i in range(n_b):
            raw.open("nosend", daemon, unix=False)
            raw.open("nosend", daemon, unix=True)
        for i in range(n_c):
            raw.open("stall", daemon, unix=i % 2 == 0, payload=PREFACE[:10])
            raw.open("stall", daemon, unix=i % 2 == 0, payload=PREFACE + SETTINGS)
            raw.open("stall", daemon, unix=i % 2 == 1, payload=half_frame())
            raw.open("stall", daemon, unix=i % 2 == 1, payload=half_message())
        multi = many_half_streams()
        for i in range(n_multi):
            raw.open("stall", daemon, unix=i % 2 == 0, payload=multi)
        bc_conns = 2 * n_b + 4 * n_c + n_multi
        time.sleep(phase_s)
        # A half-sent stream holds its bytes (200 here) plus the call's
        # state, 12 KiB measured: counted as 16 KiB. The daemon allows 1024
        # streams per connection (MAX_CONCURRENT_STREAMS, checked above);
        # the 200 streams here stay under it.
        phase("bc", t0, time.monotonic(),
              base_rss + bc_conns * 128 * KIB + n_multi * 200 * 16 * KIB + 64 * MIB)
        if raw.failed_connects:
            failures.append(f"bc: {raw.failed_connects} connects failed")

        # (d) thousands of connections.
        print(f"== d: {long_conns} long connections (preface + SETTINGS, then "
              f"idle) and {short_conns} short gRPC channels ({phase_s:.0f} s)",
              flush=True)
        t0 = time.monotonic()
        before = daemon.status()[0]
        many = RawConnections()
        for i in range(long_conns):
            many.open("long", daemon, unix=i % 2 == 0, payload=PREFACE + SETTINGS)
        short_done = {"ok": 0, "failed": 0}

        def short_channels():
            import grpc
            for i in range(short_conns):
                target = daemon.tcp if i % 2 else daemon.unix
                with grpc.insecure_channel(target, options=[
                        ("grpc.use_local_subchannel_pool", 1)]) as ch:
                    try:
                        rpc.GpuStreamStub(ch).GetVersion(
                            pb.GetVersionRequest(min_version=1, max_version=1),
                            timeout=5)
                        short_done["ok"] += 1
                    except grpc.RpcError:
                        short_done["failed"] += 1
                if time.monotonic() - t0 > phase_s + 20:
                    break
        th = threading.Thread(target=short_channels, daemon=True)
        th.start()
        time.sleep(phase_s)
        th.join(timeout=30)
        fig = phase("d", t0, time.monotonic(),
                    before + (long_conns + short_conns) * 128 * KIB + 64 * MIB)
        fig["long_open_at_end"] = many.open_count()
        fig["short_ok"] = short_done["ok"]
        fig["kib_per_long_connection"] = round(
            (sampler.window(t0, time.monotonic())["rss_peak"] - before) / KIB /
            long_conns, 1)
        if many.failed_connects:
            failures.append(f"d: {many.failed_connects} of {long_conns} connects failed")
        if short_done["ok"] != short_conns:
            failures.append(f"d: {short_done['ok']} of {short_conns} short channels "
                            f"got an answer ({short_done['failed']} failed)")
        many.close_all()

        # (a) clients that never read their streams, in rounds: a round
        # that needs more memory than the first would be a leak.
        a_peaks = []
        time.sleep(0.5)  # (d)'s connections closed by now
        pre_a_rss = daemon.status()[0]
        figures["rss_pre_a_mib"] = round(pre_a_rss / MIB, 1)
        print(f"   VmRSS before (a): {pre_a_rss / MIB:.1f} MiB", flush=True)
        for rnd in range(a_rounds):
            name = "a" if a_rounds == 1 else f"a{rnd + 1}"
            print(f"== {name}: {nonreaders} clients never reading their Submit "
                  f"and notification streams, 4 MiB reads, "
                  f"max_pending_result_bytes {pending_limit // MIB} MiB "
                  f"({phase_s + 4:.0f} s)", flush=True)
            t0 = time.monotonic()
            before = daemon.status()[0]
            procs = []
            for i in range(nonreaders):
                out = os.path.join(tmp, f"nonreader{rnd}-{i}.txt")
                procs.append((D.spawn([
                    sys.executable, __file__, "--nonreader", "--tmp", tmp,
                    "--target", daemon.unix if i % 2 else daemon.tcp, "--out", out,
                    "--max_seconds", str(phase_s + A_FILL_WAIT_S + 30),
                    "--lease", "3"], nice=ABUSER_NICE), out))
            # The abuse is real: every non-reader's Submit and notification
            # stream open in the daemon, and the daemon holding about the
            # pending cap for each (VmRSS), both bounded by A_FILL_WAIT_S.
            want_streams = base_metrics["submit_streams"] + nonreaders
            want_notes = base_metrics["notification_streams"] + nonreaders
            want_rise = A_MIN_FILL_SHARE * nonreaders * pending_limit
            streams_s = filled_s = None
            mid = scrape(metrics_port)
            while time.monotonic() < t0 + A_FILL_WAIT_S:
                now = time.monotonic()
                if streams_s is None:
                    mid = scrape(metrics_port)
                    if (mid["submit_streams"] == want_streams and
                            mid["notification_streams"] == want_notes):
                        streams_s = now - t0
                if (filled_s is None and sampler.window(t0, now)["rss_peak"] -
                        before >= want_rise):
                    filled_s = now - t0
                if streams_s is not None and filled_s is not None:
                    break
                time.sleep(0.25)
            # Then the abuse goes on for phase_s (at least phase_s + 4 in all).
            hold_until = max(time.monotonic() + phase_s, t0 + phase_s + 4)
            while time.monotonic() < hold_until:
                time.sleep(0.25)
            started = sum(os.path.exists(o) for _, o in procs)
            if started != nonreaders:
                failures.append(f"{name}: only {started} of {nonreaders} "
                                f"non-readers started")
            held = scrape(metrics_port)
            rise = sampler.window(t0, time.monotonic())["rss_peak"] - before
            fig = phase(name, t0, time.monotonic(),
                        before + nonreaders * (pending_limit + 20 * MIB) + 64 * MIB)
            fig["submit_streams_open"] = held["submit_streams"]
            fig["notification_streams_open"] = held["notification_streams"]
            fig["streams_open_after_s"] = (None if streams_s is None else
                                           round(streams_s, 1))
            fig["rss_rise_mib"] = round(rise / MIB, 1)
            fig["rss_rise_wanted_mib"] = round(want_rise / MIB, 1)
            fig["rise_reached_after_s"] = (None if filled_s is None else
                                           round(filled_s, 1))
            if streams_s is None:
                failures.append(
                    f"{name}: the non-readers' streams never all open within "
                    f"{A_FILL_WAIT_S:.0f} s: submit_streams_open "
                    f"{mid['submit_streams']:.0f} (want {want_streams:.0f}), "
                    f"notification_streams_open "
                    f"{mid['notification_streams']:.0f} (want {want_notes:.0f})")
            elif (held["submit_streams"] != want_streams or
                  held["notification_streams"] != want_notes):
                failures.append(
                    f"{name}: the non-readers' streams did not stay open: "
                    f"submit {held['submit_streams']:.0f} (want "
                    f"{want_streams:.0f}), notification "
                    f"{held['notification_streams']:.0f} (want {want_notes:.0f})")
            if filled_s is None:
                failures.append(
                    f"{name}: VmRSS rose {rise / MIB:.1f} MiB, under "
                    f"{A_MIN_FILL_SHARE:.0%} of {nonreaders} x "
                    f"{pending_limit // MIB} MiB = {want_rise / MIB:.0f} MiB "
                    f"within {A_FILL_WAIT_S:.0f} s: the pending cap was not "
                    f"reached, so the memory bound proves nothing")
            a_peaks.append(sampler.window(t0, time.monotonic())["rss_peak"])
            for p, _ in procs:
                p.kill()
                p.wait(timeout=10)
            back = wait_baseline(15)
            fig["sessions_back_s"] = back
            if back is None:
                failures.append(f"{name}: sessions and streams not back to the "
                                f"baseline 15 s after the non-readers died")
            # VmRSS back down: within RSS_BACK_WAIT_S of the sessions and
            # streams being gone, <= VmRSS before (a) + 64 MiB.
            bound = pre_a_rss + MAX_RSS_GROWTH_AFTER_A
            t_rss = time.monotonic()
            rss_after = daemon.status()[0]
            while rss_after > bound and time.monotonic() < t_rss + RSS_BACK_WAIT_S:
                time.sleep(0.1)
                rss_after = daemon.status()[0]
            fig.update(rss_pre_mib=round(pre_a_rss / MIB, 1),
                       rss_after_mib=round(rss_after / MIB, 1),
                       rss_after_bound_mib=round(bound / MIB, 1),
                       rss_back_s=round(time.monotonic() - t_rss, 1))
            print(f"   {name} VmRSS: before (a) {pre_a_rss / MIB:.1f} MiB, peak "
                  f"{a_peaks[-1] / MIB:.1f} MiB, after {rss_after / MIB:.1f} MiB "
                  f"(bound {bound / MIB:.1f} MiB, waited "
                  f"{fig['rss_back_s']} s)", flush=True)
            if rss_after > bound:
                failures.append(
                    f"{name}: VmRSS {rss_after / MIB:.1f} MiB {RSS_BACK_WAIT_S:.0f} s "
                    f"after the non-readers' sessions were gone > before (a) "
                    f"{pre_a_rss / MIB:.1f} MiB + "
                    f"{MAX_RSS_GROWTH_AFTER_A // MIB} MiB (peak "
                    f"{a_peaks[-1] / MIB:.1f} MiB)")
        if len(a_peaks) > 1 and max(a_peaks[1:]) > a_peaks[0] * 1.1 + 32 * MIB:
            failures.append(f"a: VmRSS peaks grow round over round (a leak?): "
                            f"{[round(x / MIB) for x in a_peaks]} MiB")

        # Recovery: the abusers are gone.
        print("== recovery: abusers gone; waiting for sessions and streams to "
              "return to the baseline", flush=True)
        back = wait_baseline(20)
        if back is None:
            failures.append(f"recovery: not back to the baseline in 20 s: "
                            f"{scrape(metrics_port)} vs {base_metrics}")
        t1 = time.monotonic()
        # Four seconds: p99 over some 500 probes, not the third-worst of
        # 250 (one hiccup while the abusers' connections were still being
        # reaped failed a 2-second window on a loaded 2-core machine: 26.6
        # ms against a 23 ms bound; 7.4 ms on a rerun).
        time.sleep(4.0)
        fig = phase("recovery", t1, time.monotonic())
        fig["back_to_baseline_s"] = None if back is None else round(back, 1)
        fig["rss_after_mib"] = round(daemon.status()[0] / MIB, 1)
        fig["threads_after"] = daemon.status()[1]
        if fig["threads_after"] > base_threads + 16:
            failures.append(f"recovery: {fig['threads_after']} threads > "
                            f"baseline {base_threads} + 16")

        # Every raw connection of (b)/(c) closed by the daemon itself, each
        # within KEEPALIVE_CLOSE_S of its accept.
        wait_until = raw.last_opened({"nosend", "stall"}) + KEEPALIVE_CLOSE_S
        print(f"== keepalive: waiting up to {max(0, wait_until - time.monotonic()):.0f} s "
              f"for the daemon to close the {bc_conns} stalled connections",
              flush=True)
        while time.monotonic() < wait_until and raw.open_count() > 0:
            time.sleep(0.5)
        total, closed, longest = raw.summary({"nosend", "stall"})
        figures["keepalive"] = {"connections": total, "closed_by_daemon": closed,
                                "longest_open_s": round(longest, 1),
                                "limit_s": KEEPALIVE_CLOSE_S}
        print(f"   keepalive: {json.dumps(figures['keepalive'])}", flush=True)
        if closed != total:
            failures.append(f"keepalive: {total - closed} of {total} stalled "
                            f"connections still open {KEEPALIVE_CLOSE_S} s "
                            f"after they were accepted")
        elif longest > KEEPALIVE_CLOSE_S:
            failures.append(f"keepalive: a stalled connection was open "
                            f"{longest:.1f} s before the daemon closed it "
                            f"(limit {KEEPALIVE_CLOSE_S} s)")
        raw.close_all()
        if not daemon.alive():
            failures.append("the daemon died")
    finally:
        sampler.stop.set()
        rc, drain_s = daemon.terminate()
    if rc != 0:
        failures.append(f"daemon exit status {rc} after SIGTERM")
    print("== abuse summary: " + json.dumps(figures), flush=True)
    if failures:
        print("ABUSE FAILED:\n  " + "\n  ".join(failures), flush=True)
        print(f"(logs kept in {tmp})")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("ABUSE OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
