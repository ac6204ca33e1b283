#!/usr/bin/python3
"""Soak phase "drain": SIGTERM under full load.

Starts gpustreamd (CPU backend, unix socket + TCP 127.0.0.1), runs several
client processes that pipeline work on Submit streams, sends SIGTERM while
they run, and checks docs/api.md's shutdown contract:

  - the daemon exits (status 0) within 10 s of the signal;
  - every command acknowledged before the signal (completed_seq received)
    either completed, with its effect seen by the client (a fill_u32 value
    read back, a write_flag value returned by wait_flag), or one of its own
    results, or the stream's final status with the details "daemon
    shutting down", carried UNAVAILABLE; no other status code, no hang (every client call
    has a deadline, and a deadline hit is a failure);
  - the unix socket file is gone;
  - a daemon restarted on the same socket and port serves at once: its
    ready file (listeners bound) within 2 s of the spawn, then GetVersion
    and health SERVING on both listeners answered (each call bounded 5 s;
    the time to the first answer is printed as restart_s).

Each client batch k on its queue (seq 4k+1 .. 4k+4):
  launch fill_u32(buf, k) | write_flag(flag, k) | read_buffer(buf) | wait_flag(flag >= k)
The first two are plain (answered by completed_seq only); the read and the
wait are waiting commands whose results prove them (the queue is in order,
so a later batch's proof proves the earlier ones too). A "spin" client
launches spin_ns kernels instead, so CPU kernels run when the signal comes;
a "slow reader" sleeps after each response, so results of acknowledged work
are still on their way when the signal comes. On SIGTERM the daemon tears
every session down at once (docs/operations.md): work not yet done is
answered UNAVAILABLE, never completed later; "proven after the signal"
counts results of acknowledged work that reached the client during the
drain (the transport's 2 s grace) instead of being dropped.

Usage: /usr/bin/python3 tools/soak/drain.py [--short]
Exit status 0 when every check holds; prints the figures either way.
"""

import argparse
import json
import os
import queue
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gsd as D  # noqa: E402

OK, UNAVAILABLE = 0, 14
DRAIN_LIMIT_S = 10.0
# The restarted daemon's ready file (listeners bound) after its spawn: ~0.1 s
# idle, but the drained clients' processes may still share 2 cores.
RESTART_LIMIT_S = 5.0


# ----------------------------------------------------------------- client --

def run_client(args):
    """One load client (a process of its own); writes its record as JSON."""
    import grpc
    pb, rpc = D.stubs(args.tmp)
    record = {"name": args.name, "batches": {}, "codes": {}, "stream_code": None,
              "stream_detail": "", "after_code": None, "error": None,
              "details": []}
    deadline_s = args.max_seconds
    ch = grpc.insecure_channel(args.target)
    gs = rpc.GpuStreamStub(ch)
    n_words = args.buffer_bytes // 4
    try:
        s = gs.OpenSession(pb.OpenSessionRequest(client_name=args.name),
                           timeout=10)
    except grpc.RpcError as e:
        record["error"] = f"OpenSession: {e.code().name} {e.details()}"
        json.dump(record, open(args.out, "w"))
        return
    sid = s.session_id
    FLAG, BUF, Q = 1, 2, 3
    setup = [
        pb.Command(seq=1, create_flag=pb.CreateFlagRequest(id=FLAG)),
        pb.Command(seq=2, allocate_buffer=pb.AllocateBufferRequest(
            id=BUF, size_bytes=args.buffer_bytes)),
        pb.Command(seq=3, create_queue=pb.CreateQueueRequest(id=Q)),
    ]
    requests = queue.Queue()
    requests.put(pb.SubmitRequest(session_id=sid, commands=setup))
    stop = threading.Event()

    def request_iter():
        while True:
            try:
                r = requests.get(timeout=0.5)
            except queue.Empty:
                if stop.is_set():
                    return
                continue
            if r is None:
                return
            yield r

    # batch k -> {"sent", "ack" (monotonic time), "proof": code of read/wait}
    batches = {}
    lock = threading.Condition()
    state = {"confirmed": 0, "completed_seq": 0, "next": 1}
    failed_seqs = {}

    def batch_of(seq):
        return (seq - 1) // 4 if seq > 4 else 0

    def sender():
        k = 1
        while not stop.is_set():
            with lock:
                while (not stop.is_set() and
                       k - state["confirmed"] > args.window):
                    lock.wait(0.5)
                if stop.is_set():
                    return
                batches[k] = {"sent": time.monotonic(), "ack": None,
                              "read": None, "wait": None, "value": None,
                              "proof_t": None}
            base = 4 * k
            if args.spin_ns:
                first = pb.LaunchKernelRequest(
                    queue_id=Q, module="samples", kernel="spin_ns",
                    grid=pb.Dim3(x=1), block=pb.Dim3(x=1),
                    args=[pb.KernelArg(u64=args.spin_ns)])
            else:
                first = pb.LaunchKernelRequest(
                    queue_id=Q, module="samples", kernel="fill_u32",
                    grid=pb.Dim3(x=(n_words + 255) // 256), block=pb.Dim3(x=256),
                    args=[pb.KernelArg(buffer=pb.BufferArg(buffer_id=BUF)),
                          pb.KernelArg(u32=k), pb.KernelArg(u64=n_words)])
            cmds = [pb.Command(seq=base + 1, launch_kernel=first),
                    pb.Command(seq=base + 2, write_flag=pb.WriteFlagRequest(
                        queue_id=Q, flag_id=FLAG, value=k))]
            if not args.spin_ns:
                cmds.append(pb.Command(seq=base + 3, read_buffer=pb.ReadBufferRequest(
                    queue_id=Q, buffer_id=BUF, size=args.buffer_bytes)))
            cmds.append(pb.Command(seq=base + 4, wait_flag=pb.WaitFlagRequest(
                flag_id=FLAG, value=k,
                condition=pb.WAIT_CONDITION_GREATER_EQUAL,
                timeout_ms=int(deadline_s * 1000))))
            requests.put(pb.SubmitRequest(commands=cmds))
            k += 1

    def count(code):
        record["codes"][str(code)] = record["codes"].get(str(code), 0) + 1

    t_sender = threading.Thread(target=sender, daemon=True)
    t_sender.start()
    call = gs.Submit(request_iter(), timeout=deadline_s)
    partial = {}
    try:
        for resp in call:
            now = time.monotonic()
            with lock:
                for r in resp.results:
                    k = batch_of(r.seq)
                    slot = r.seq - 4 * k
                    if r.status.code != OK:
                        count(r.status.code)
                        failed_seqs[r.seq] = r.status.code
                        if len(record["details"]) < 5:
                            record["details"].append(
                                f"seq {r.seq}: {r.status.code} "
                                f"{r.status.message}")
                        if k in batches:
                            key = {1: "c1", 2: "c2", 3: "read", 4: "wait"}[slot]
                            batches[k][key] = r.status.code
                            if slot in (3, 4):
                                state["confirmed"] = max(state["confirmed"], k)
                        continue
                    count(OK)
                    if r.HasField("read_buffer"):
                        buf = partial.setdefault(r.seq, bytearray())
                        buf += r.read_buffer.data
                        if r.read_buffer.more:
                            continue
                        data = bytes(partial.pop(r.seq))
                        good = (len(data) == args.buffer_bytes and
                                struct.unpack_from("<I", data, 0)[0] == k and
                                struct.unpack_from("<I", data, len(data) - 4)[0] == k)
                        if k in batches:
                            batches[k]["read"] = OK if good else "BADDATA"
                    elif r.HasField("wait_flag") and k in batches:
                        batches[k]["wait"] = OK
                        batches[k]["value"] = r.wait_flag.value
                        batches[k]["proof_t"] = now
                        state["confirmed"] = max(state["confirmed"], k)
                        if k == 1:  # Loaded: the coordinator may start its clock.
                            open(args.out + ".ready", "w").close()
                if resp.completed_seq > state["completed_seq"]:
                    state["completed_seq"] = resp.completed_seq
                    for k, b in batches.items():
                        if b["ack"] is None and 4 * k + 2 <= resp.completed_seq:
                            b["ack"] = now
                lock.notify_all()
            if args.read_delay_ms:  # A slow reader: results back up.
                time.sleep(args.read_delay_ms / 1000.0)
        record["stream_code"] = OK
    except grpc.RpcError as e:
        record["stream_code"] = e.code().value[0]
        record["stream_detail"] = e.details() or ""
    record["stream_end"] = time.monotonic()
    stop.set()
    requests.put(None)
    with lock:
        lock.notify_all()
    t_sender.join(timeout=5)
    # One more unary call: the daemon is gone or going, so UNAVAILABLE.
    try:
        gs.KeepAlive(pb.KeepAliveRequest(session_id=sid), timeout=5)
        record["after_code"] = OK
    except grpc.RpcError as e:
        record["after_code"] = e.code().value[0]
    record["batches"] = {str(k): b for k, b in batches.items()}
    record["failed_seqs"] = {str(k): v for k, v in failed_seqs.items()}
    with open(args.out + ".tmp", "w") as f:
        json.dump(record, f)
    os.rename(args.out + ".tmp", args.out)
    ch.close()


# ------------------------------------------------------------ coordinator --

def health_serving(target, timeout):
    import grpc
    with grpc.insecure_channel(target) as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
        return check(b"", timeout=timeout) == b"\x08\x01"  # status: SERVING


SLOW_READER_DELAY_MS = 40
SHUTDOWN_DETAIL = "daemon shutting down"  # server/rpc/submit_reactor.cc


def analyse(record, t_sig):
    """Counts for one client; `lost` lists acknowledged batches unaccounted.

    A batch acknowledged (completed_seq) before the signal is
      completed    when it or a later batch of the queue is proven (its
                   wait_flag answered OK with the batch's value, its read
                   OK): the queue is in order;
      unavailable  when one of its own results carries UNAVAILABLE, or the
                   stream ended with UNAVAILABLE whose details say the
                   daemon is shutting down (SHUTDOWN_DETAIL);
      lost         otherwise (a transport error ending the stream does not
                   account for it).
    proven_after counts the completed ones whose first proof came after
    the signal: the drain finished work already acknowledged.
    delivered_after counts proofs (of any batch) that reached the client
    after the signal: the drain delivered results rather than dropping
    them. A batch's acknowledgement and its proof often share a response,
    so proven_after may be 0 in a short round; delivered_after is not, while
    a slow reader has results it has not read yet."""
    out = {"acked": 0, "completed": 0, "proven_after": 0, "unavailable": 0,
           "delivered_after": 0,
           "unavailable_by_stream": 0, "lost": [], "bad_codes": {},
           "bad_data": 0}
    for code, n in record["codes"].items():
        if int(code) not in (OK, UNAVAILABLE):
            out["bad_codes"][code] = n
    if record["stream_code"] not in (OK, UNAVAILABLE):
        out["bad_codes"][f"stream:{record['stream_code']}"] = 1
    if record["after_code"] not in (UNAVAILABLE,):
        out["bad_codes"][f"after:{record['after_code']}"] = 1
    stream_shutdown = (record["stream_code"] == UNAVAILABLE and
                       SHUTDOWN_DETAIL in (record["stream_detail"] or ""))
    batches = {int(k): b for k, b in record["batches"].items()}
    # first_proof[k]: the earliest time a batch >= k was proven (a proof of
    # a later batch proves the earlier ones: the queue is in order).
    first_proof, best = {}, None
    for k in sorted(batches, reverse=True):
        b = batches[k]
        if b["wait"] == OK and (b.get("proof_t") or 0) >= t_sig:
            out["delivered_after"] += 1
        if b["read"] == "BADDATA":
            out["bad_data"] += 1
        if (b["wait"] == OK and b["read"] in (None, OK) and
                (b["value"] or 0) >= k and b.get("proof_t") is not None):
            best = b["proof_t"] if best is None else min(best, b["proof_t"])
        first_proof[k] = best
    for k, b in sorted(batches.items()):
        if b["ack"] is None or b["ack"] >= t_sig:
            continue
        out["acked"] += 1
        if first_proof[k] is not None:
            out["completed"] += 1
            if first_proof[k] >= t_sig:
                out["proven_after"] += 1
        elif UNAVAILABLE in (b["read"], b["wait"], b.get("c1"), b.get("c2")):
            out["unavailable"] += 1
        elif stream_shutdown:
            out["unavailable"] += 1
            out["unavailable_by_stream"] += 1
        else:
            out["lost"].append(k)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--short", action="store_true", help="the CI version (<= ~60 s)")
    ap.add_argument("--no_build", action="store_true",
                    help="use the built daemon as it is (no bazel build)")
    ap.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tmp"), ap.add_argument("--target"), ap.add_argument("--name")
    ap.add_argument("--out"), ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--buffer_bytes", type=int, default=1 << 20)
    ap.add_argument("--spin_ns", type=int, default=0)
    ap.add_argument("--read_delay_ms", type=float, default=0)
    ap.add_argument("--max_seconds", type=float, default=60)
    args = ap.parse_args()
    if args.client:
        return run_client(args)

    D.install_signal_cleanup()
    D.build_daemon(skip=args.no_build)
    tmp = tempfile.mkdtemp(prefix="gs-drain-")
    pb, rpc = D.stubs(tmp)
    rounds = 1 if args.short else 3
    clients = 6 if args.short else 12
    load_s = 8.0 if args.short else 20.0
    failures = []
    figures = []
    daemon = D.Daemon(tmp)
    try:
        daemon.start()
    except Exception as e:
        print(f"DRAIN FAILED:\n  first start: {e}\n{daemon.log_tail()}",
              flush=True)
        print(f"(logs kept in {tmp})")
        daemon.terminate()
        return 1
    for rnd in range(rounds):
        print(f"== round {rnd + 1}/{rounds}: {clients} clients, "
              f"{load_s:.0f} s of load, then SIGTERM", flush=True)
        procs, outs = [], []
        for i in range(clients):
            out = os.path.join(tmp, f"r{rnd}-c{i}.json")
            spin = i % 4 == 3  # every fourth client runs 50 ms kernels
            target = daemon.unix if i % 2 == 0 else daemon.tcp
            cmd = [sys.executable, os.path.abspath(__file__), "--client",
                   "--tmp", tmp, "--target", target, "--name", f"drain-{i}",
                   "--out", out, "--max_seconds", str(load_s + 100),
                   "--buffer_bytes", str((256 << 10) if args.short else (1 << 20))]
            if spin:
                cmd += ["--spin_ns", str(50_000_000), "--window", "2"]
            elif i % 4 == 1:
                # A slow reader: results of acknowledged work (computed
                # before the signal) are still queued when it comes, and
                # must reach the client during the drain, not be dropped.
                cmd += ["--read_delay_ms", str(SLOW_READER_DELAY_MS)]
            procs.append(D.spawn(cmd))
            outs.append(out)
        # Python clients start slowly on a busy machine: the load time
        # counts from when every client has its first batch proven.
        ready_by = time.monotonic() + 60
        while (time.monotonic() < ready_by and
               not all(os.path.exists(o + ".ready") for o in outs)):
            time.sleep(0.1)
        not_ready = sum(not os.path.exists(o + ".ready") for o in outs)
        if not_ready:
            failures.append(f"round {rnd + 1}: {not_ready} of {clients} clients "
                            f"had no batch proven within 60 s of their spawn")
        time.sleep(load_s)
        rss, threads = daemon.status()
        t_sig = time.monotonic()
        rc, drain_s = daemon.terminate(timeout=30)
        sock_left = os.path.exists(daemon.sock_path)
        # Every client ends on its own: its stream has a deadline.
        for p in procs:
            try:
                p.wait(timeout=load_s + 120)
            except subprocess.TimeoutExpired:
                p.kill()
                failures.append(f"round {rnd + 1}: a client hung past its bounds")
        # Restart on the same socket and port: serves at once. Timed from
        # the spawn to the first answered call (ready file, then GetVersion
        # and health SERVING on both listeners).
        restart_ok, restart_ready_s = False, None
        t0 = time.monotonic()
        try:
            daemon = D.Daemon(tmp, port=daemon.port,
                              log_name=f"gpustreamd-{rnd + 1}.log")
            daemon.start(timeout=RESTART_LIMIT_S + 10)
            restart_ready_s = time.monotonic() - t0
            import grpc
            with grpc.insecure_channel(daemon.unix) as ch:
                rpc.GpuStreamStub(ch).GetVersion(
                    pb.GetVersionRequest(min_version=1, max_version=1), timeout=5)
            restart_ok = health_serving(daemon.unix, 5) and health_serving(daemon.tcp, 5)
        except Exception as e:  # reported below
            print(f"restart failed: {e}", flush=True)
        restart_s = time.monotonic() - t0

        totals = {"acked": 0, "completed": 0, "proven_after": 0,
                  "delivered_after": 0, "unavailable": 0, "unavailable_by_stream": 0, "lost": 0,
                  "bad_data": 0}
        codes = {}
        stream_codes = {}
        stream_details = {}
        result_details = []
        for out, p in zip(outs, procs):
            if not os.path.exists(out):
                failures.append(f"round {rnd + 1}: client {out} wrote no record "
                                f"(exit {p.returncode})")
                continue
            rec = json.load(open(out))
            if rec["error"]:
                failures.append(f"round {rnd + 1}: {rec['name']}: {rec['error']}")
                continue
            a = analyse(rec, t_sig)
            for key in ("acked", "completed", "proven_after",
                        "delivered_after", "unavailable",
                        "unavailable_by_stream", "bad_data"):
                totals[key] += a[key]
            totals["lost"] += len(a["lost"])
            for c, n in rec["codes"].items():
                codes[c] = codes.get(c, 0) + n
            sc = f"{rec['stream_code']}"
            stream_codes[sc] = stream_codes.get(sc, 0) + 1
            sd = rec["stream_detail"] or ""
            stream_details[sd] = stream_details.get(sd, 0) + 1
            for d in rec.get("details", []):
                if len(result_details) < 3:
                    result_details.append(f"{rec['name']} {d}")
            if a["lost"]:
                failures.append(f"round {rnd + 1}: {rec['name']}: acknowledged "
                                f"batches {a['lost'][:5]} ({len(a['lost'])} in "
                                f"all) neither proven nor answered UNAVAILABLE "
                                f"(stream ended {rec['stream_code']} "
                                f"{rec['stream_detail']!r})")
            if a["bad_codes"]:
                failures.append(f"round {rnd + 1}: {rec['name']}: codes other than "
                                f"OK/UNAVAILABLE: {a['bad_codes']} "
                                f"({rec['stream_detail']!r})")
            if a["bad_data"]:
                failures.append(f"round {rnd + 1}: {rec['name']}: "
                                f"{a['bad_data']} reads returned wrong data")
            if a["acked"] == 0:
                failures.append(f"round {rnd + 1}: {rec['name']}: nothing "
                                f"acknowledged before the signal (no load?)")
        if totals["delivered_after"] == 0:
            failures.append(f"round {rnd + 1}: no result reached a client after "
                            f"the signal (slow readers had results unread): "
                            f"the drain delivered nothing")
        if rc != 0:
            failures.append(f"round {rnd + 1}: daemon exit status {rc} after SIGTERM")
        if drain_s >= DRAIN_LIMIT_S:
            failures.append(f"round {rnd + 1}: drain took {drain_s:.2f} s "
                            f"(limit {DRAIN_LIMIT_S} s)")
        if sock_left:
            failures.append(f"round {rnd + 1}: unix socket {daemon.sock_path} "
                            f"left after exit")
        if (not restart_ok or restart_ready_s is None or
                restart_ready_s > RESTART_LIMIT_S):
            failures.append(f"round {rnd + 1}: restart not serving within "
                            f"{RESTART_LIMIT_S} s of its spawn (ready after "
                            f"{restart_ready_s} s, first calls answered after "
                            f"{restart_s:.2f} s, ok={restart_ok})")
        fig = dict(round=rnd + 1, drain_s=round(drain_s, 3), exit=rc,
                   socket_removed=not sock_left, restart_s=round(restart_s, 3),
                   restart_ready_s=restart_ready_s and round(restart_ready_s, 3),
                   load_avg=round(os.getloadavg()[0], 1),
                   rss_mib_at_signal=round(rss / 2**20, 1),
                   threads_at_signal=threads, **totals,
                   result_codes=codes, stream_end_codes=stream_codes,
                   stream_end_details=stream_details,
                   result_details=result_details)
        figures.append(fig)
        print("   " + json.dumps(fig), flush=True)
        if not restart_ok:  # No daemon to run the next round against.
            failures.append(f"round {rnd + 1}: no further rounds (the restart "
                            f"failed; its log: {daemon.log_path})")
            break

    daemon.terminate()
    print("== drain summary: " + ", ".join(
        f"round {f['round']}: drain {f['drain_s']:.2f} s, restart {f['restart_s']:.2f} s, "
        f"ready file after {f['restart_ready_s']} s (limit {RESTART_LIMIT_S} s), "
        f"{f['acked']} acknowledged batches = {f['completed']} completed "
        f"({f['proven_after']} proven after the signal; "
        f"{f['delivered_after']} results delivered after it) + "
        f"{f['unavailable']} UNAVAILABLE ({f['unavailable_by_stream']} by the "
        f"stream's status), {f['lost']} lost" for f in figures))
    if failures:
        print("DRAIN FAILED:\n  " + "\n  ".join(failures), flush=True)
        print(f"(logs kept in {tmp})")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("DRAIN OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
