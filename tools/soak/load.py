#!/usr/bin/python3
"""Soak phases "load" and "kill" against one gpustreamd (CPU backend).

load: N soak_client processes (8 queues each), R rounds per slot, each a
  seeded random mix of M operations whose every read-back is checked against
  the client's model. The daemon's VmRSS and thread count are sampled every
  0.5 s; the run passes when no client saw a lost, duplicated or corrupted
  result (zero mismatches, zero errors) and RSS and threads are flat after
  warm-up (bounds printed with their reasons).
kill: K client processes SIGKILLed at random points of the same mix, in
  waves, alongside survivors that must finish with every result correct.
  Each is killed a random delay after it printed READY (session, queues and
  objects set up), so it dies with commands in flight; >= 90% of the killed
  clients' sessions must be listed by the daemon after their kill (left for
  the lease to reclaim).
  Afterwards every session is gone (the daemon notices through the 2 s lease
  that the killed client's dead Submit stream no longer renews) and the
  sessions, objects, memory, commands in flight and staged bytes are exactly
  their values before the storm.

Usage: /usr/bin/python3 tools/soak/load.py [load|kill|all] [--short] [flags]
(the binaries must be built: bazel build //server:gpustreamd
//tools/soak:soak_client //tools/gpustreamctl). Exit status 0: every check
held; the figures are printed either way.
"""

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402

LOG = H.log

# A killed client's session lives until its lease runs out: short, so the
# storm's sessions go within seconds (docs/api.md, "Leases").
KILL_LEASE_S = 2
# The soak's own bound on any client: past it the client reports and exits.
CLIENT_DEADLINE_S = 300
# A client to be killed must print READY (session and objects set up)
# within this of its spawn; it is killed a random delay after READY, at
# least KILL_MIN_DELAY_S, so its mix has commands in flight.
READY_WAIT_S = 20
KILL_MIN_DELAY_S = 0.05
# Of the killed clients, at least this share must have left a live session
# behind (listed by the daemon right after the kill).
MIN_LEASED_SHARE = 0.9

# RSS tolerance of "flat" (see check_flat): a leak of a few dozen bytes per
# command over the measured span exceeds it, while allocator noise (glibc
# arenas, gRPC's per-connection buffers whose sizes follow the traffic) stays
# well within it.
RSS_TOLERANCE_KIB = 16 * 1024
# gRPC 1.51 grows some pools on demand and keeps them a while (the
# callback executor, up to 2 threads per core; the event engine's pool and
# timer manager, a few threads each): the margin over the threads seen idle.
GRPC_GROWTH_PER_CORE = 3
GRPC_GROWTH_FIXED = 4


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def check(self, what):
        if time.monotonic() > self.end:
            H.fail(f"soak deadline of {self.seconds:.0f} s passed during {what}")


def client_result(c, code):
    """None if the client finished with every result verified, else why."""
    s = c.summary()
    if code != 0 or s is None or s.get("mismatches", 1) or s.get("errors", 1):
        return f"{c.name}: exit {code}, summary {s}: {c.output()[-600:]}"
    return None


def add_totals(totals, s):
    for k in ("ops", "commands", "verified", "verified_bytes"):
        totals[k] = totals.get(k, 0) + int(s.get(k, 0))


def thread_bound(idle_threads, cores, teardowns=0):
    """Threads the daemon may have: those it has idle (its own: main,
    housekeeper, timer, CPU cleanup, watchdog, one per CPU execution thread;
    gRPC's: pollers, timers, executors), gRPC's on-demand growth, and one
    short-lived thread per session being torn down (session_manager.cc)."""
    return (idle_threads + GRPC_GROWTH_PER_CORE * cores + GRPC_GROWTH_FIXED +
            teardowns)


def check_flat(samples, start_t, end_t, idle_threads, cores, figures):
    """RSS and threads over [start_t, end_t] (all clients running, warm-up
    excluded), split in thirds: the last third's RSS peak may exceed the
    first's by RSS_TOLERANCE_KIB at most, and threads stay under
    thread_bound() throughout."""
    window = [s for s in samples if start_t <= s[0] <= end_t]
    if len(window) < 6:
        H.fail(f"load: only {len(window)} samples in the steady window "
               f"[{start_t:.1f}, {end_t:.1f}] s: too short to judge flatness "
               "(raise --ops or --rounds)")
    third = len(window) // 3
    first, last = window[:third], window[-third:]
    rss_first = max(s[1] for s in first)
    rss_last = max(s[1] for s in last)
    threads_max = max(s[2] for s in window)
    bound = thread_bound(idle_threads, cores)
    figures["load RSS first/last third peak (MiB)"] = (
        f"{H.mib(rss_first):.1f} / {H.mib(rss_last):.1f} "
        f"(tolerance +{H.mib(RSS_TOLERANCE_KIB):.0f})")
    figures["load threads idle / max / bound"] = (
        f"{idle_threads} / {threads_max} / {bound}")
    LOG(f"load: steady window {start_t:.1f}-{end_t:.1f} s, {len(window)} "
        f"samples; RSS peak first third {H.mib(rss_first):.1f} MiB, last "
        f"third {H.mib(rss_last):.1f} MiB; threads max {threads_max}, "
        f"bound {bound}")
    if rss_last > rss_first + RSS_TOLERANCE_KIB:
        H.fail(f"load: RSS grew from {H.mib(rss_first):.1f} to "
               f"{H.mib(rss_last):.1f} MiB after warm-up (tolerance "
               f"{H.mib(RSS_TOLERANCE_KIB):.0f} MiB)")
    if threads_max > bound:
        H.fail(f"load: {threads_max} threads, over the bound {bound}")


def phase_load(d, a, figures, deadline):
    LOG(f"== load: {a.clients} processes x 8 queues x {a.ops} ops, "
        f"{a.rounds} rounds per process slot")
    idle_rss, idle_threads = d.proc_status()
    cores = os.cpu_count()
    totals, failures, done = {}, [], 0
    sampler = H.Sampler(d, "load", quiet=a.quiet_samples)
    t0 = time.monotonic()
    slots = [None] * a.clients
    rounds_left = [a.rounds] * a.clients
    first_slot_done = None
    clients = []
    try:
        while True:
            deadline.check("load")
            d.check_alive()
            for i in range(a.clients):
                c = slots[i]
                if c is not None:
                    code = c.proc.poll()
                    if code is None:
                        continue
                    why = client_result(c, code)
                    if why:
                        failures.append(why)
                    else:
                        add_totals(totals, c.summary())
                    done += 1
                    slots[i] = None
                if rounds_left[i] == 0:
                    if first_slot_done is None:
                        first_slot_done = time.monotonic() - t0
                    continue
                r = a.rounds - rounds_left[i]
                rounds_left[i] -= 1
                name = f"load-{i}-r{r}"
                seed = a.seed * 1_000_003 + i * 1009 + r
                slots[i] = H.Client(d, H.client_command(
                    a.bin_dir, d, name, seed, a.ops,
                    deadline_s=CLIENT_DEADLINE_S), name)
                clients.append(slots[i])
            if all(s is None for s in slots) and not any(rounds_left):
                break
            time.sleep(0.1)
    finally:
        H.reap_all(clients)
        samples = sampler.stop()
    elapsed = time.monotonic() - t0
    figures["load clients (slots x rounds)"] = (
        f"{done} ({a.clients} x {a.rounds})")
    figures["load ops / commands"] = (
        f"{totals.get('ops', 0)} / {totals.get('commands', 0)}")
    figures["load reads verified (bytes)"] = (
        f"{totals.get('verified', 0)} ({totals.get('verified_bytes', 0)})")
    figures["load duration (s)"] = f"{elapsed:.1f}"
    figures["load RSS idle -> end (MiB)"] = (
        f"{H.mib(idle_rss):.1f} -> {H.mib(samples[-1][1]):.1f}")
    if failures:
        H.fail(f"load: {len(failures)} of {done} clients failed:\n" +
               "\n".join(failures[:10]))
    LOG(f"load: {done} clients, every result verified: {totals}")
    end_t = first_slot_done if first_slot_done is not None else elapsed
    check_flat(samples, end_t / 4, end_t, idle_threads, cores, figures)


def quiet_counters(d, timeout_s):
    """The counters once no session is left (the storm's baseline)."""
    if H.wait_until(lambda: not d.sessions(), timeout_s, 0.5) is False:
        H.fail(f"sessions still open after {timeout_s} s: {d.sessions()}")
    return d.counters()


def run_wave(d, a, wave, n_kill, rng, deadline):
    """One wave: `n_kill` clients SIGKILLed, each at a random delay in
    [KILL_MIN_DELAY_S, kill_window_s] after it printed READY (its session,
    queues and objects exist, so its mix has commands in flight), beside
    `a.survivors` that run to the end. A client that is not READY within
    READY_WAIT_S of its spawn is a failure (and is killed, not counted).

    Returns a dict: kills, failures, totals (the survivors'), leased (killed
    clients whose session was listed by the daemon in the first listing
    begun after their kill: the kill left a live session behind for the
    lease to reclaim), listed_at_last (killed sessions listed at the last
    kill), gone_s (from the last kill until none is listed), ready_s (the
    slowest READY after its spawn)."""
    clients, kill_at, failures, totals = [], {}, [], {}
    waiting_ready = {}  # client -> its spawn time
    killed_at = {}      # client -> its kill time, until a listing sees it
    prefix = f"kill-w{wave}-"
    t0 = time.monotonic()
    kills, leased, listed_at_last, t_last_kill, gone_s = 0, 0, None, None, None
    ready_s = 0.0
    next_poll = 0.0
    try:
        for j in range(n_kill + a.survivors):
            killed = j < n_kill
            name = f"{prefix}{j}" if killed else f"surv-w{wave}-{j}"
            seed = a.seed * 7_000_003 + wave * 10_007 + j
            ops = 10**8 if killed else a.survivor_ops  # Killed long before.
            c = H.Client(d, H.client_command(
                a.bin_dir, d, name, seed, ops, pace_us=a.pace_us,
                lease_seconds=KILL_LEASE_S, deadline_s=CLIENT_DEADLINE_S),
                name)
            clients.append(c)
            if killed:
                waiting_ready[c] = c.started
        while True:
            deadline.check(f"kill wave {wave}")
            now = time.monotonic()
            for c, spawned in list(waiting_ready.items()):
                if c.ready():
                    del waiting_ready[c]
                    ready_s = max(ready_s, now - spawned)
                    kill_at[c] = now + rng.uniform(KILL_MIN_DELAY_S,
                                                   a.kill_window_s)
                elif c.proc.poll() is not None:
                    del waiting_ready[c]
                    failures.append("to be killed, but it ended before "
                                    "READY: " + (client_result(
                                        c, c.proc.returncode) or c.name))
                elif now - spawned > READY_WAIT_S:
                    del waiting_ready[c]
                    c.kill()
                    failures.append(f"{c.name}: not READY {READY_WAIT_S} s "
                                    f"after its spawn: {c.output()[-600:]}")
            for c, t in list(kill_at.items()):
                if now >= t:
                    if c.proc.poll() is None:
                        c.kill()
                        kills += 1
                        t_last_kill = time.monotonic()
                        killed_at[c] = t_last_kill
                    else:  # Died on its own: a failure, not a kill.
                        failures.append("to be killed, but " + (client_result(
                            c, c.proc.returncode) or c.name))
                    del kill_at[c]
            storm_over = not waiting_ready and not kill_at
            # Each kill is followed by a listing of the sessions: the
            # killed client's must be in it (its lease is KILL_LEASE_S).
            if (killed_at or (storm_over and gone_s is None)) and \
                    now >= next_poll:
                next_poll = now + 0.25
                t_list = time.monotonic()
                names = {s["clientName"] for s in d.sessions()}
                for c, t in list(killed_at.items()):
                    if t <= t_list:
                        leased += c.name in names
                        del killed_at[c]
                n = sum(1 for name in names if name.startswith(prefix))
                if storm_over and not killed_at:
                    if listed_at_last is None:
                        listed_at_last = n
                    if n == 0:
                        gone_s = (time.monotonic() - t_last_kill
                                  if t_last_kill is not None else 0.0)
                    elif now - (t_last_kill or t0) > KILL_LEASE_S + 30:
                        H.fail(f"kill wave {wave}: {n} killed sessions still "
                               f"listed {now - (t_last_kill or t0):.0f} s "
                               "after the last kill")
            if gone_s is not None and all(c.proc.poll() is not None
                                          for c in clients):
                break
            if now - t0 > CLIENT_DEADLINE_S + 30:
                H.fail(f"kill wave {wave} ran past {CLIENT_DEADLINE_S} s")
            time.sleep(0.02)
        for c in clients:
            code = c.proc.wait(10)
            if c.name.startswith("surv"):
                why = client_result(c, code)
                if why:
                    failures.append(why)
                else:
                    add_totals(totals, c.summary())
            elif code != -9 and not any(c.name in f for f in failures):
                failures.append(f"{c.name}: exit {code}, not by SIGKILL")
    finally:
        H.reap_all(clients)
    return dict(kills=kills, failures=failures, totals=totals, leased=leased,
                listed_at_last=listed_at_last or 0, gone_s=gone_s or 0.0,
                ready_s=ready_s)


def phase_kill(d, a, figures, deadline):
    waves = -(-a.kills // (a.wave - a.survivors))
    LOG(f"== kill: {a.kills} SIGKILLs in {waves} waves of {a.wave} clients "
        f"({a.survivors} survivors each, each killed "
        f"{KILL_MIN_DELAY_S}-{a.kill_window_s} s after its READY)")
    baseline = quiet_counters(d, 120)
    rss0, threads0 = d.proc_status()
    LOG(f"kill: baseline {baseline}; rss {H.mib(rss0):.1f} MiB, threads "
        f"{threads0}")
    rng = random.Random(a.seed)
    sampler = H.Sampler(d, "kill", quiet=a.quiet_samples)
    t0 = time.monotonic()
    kills, failures, totals, lingering, gone_max = 0, [], {}, 0, 0.0
    listed_at_last, ready_max = 0, 0.0
    try:
        for w in range(waves):
            r = run_wave(d, a, w, min(a.wave - a.survivors, a.kills - kills),
                         rng, deadline)
            kills += r["kills"]
            failures += r["failures"]
            for key, v in r["totals"].items():
                totals[key] = totals.get(key, 0) + v
            d.check_alive()
            lingering += r["leased"]
            listed_at_last += r["listed_at_last"]
            ready_max = max(ready_max, r["ready_s"])
            gone_max = max(gone_max, r["gone_s"])
            rss, threads = d.proc_status()
            LOG(f"kill: wave {w + 1}/{waves}: {r['kills']} killed (READY "
                f"within {r['ready_s']:.1f} s), {r['leased']} of their "
                f"sessions listed after their kill, {r['listed_at_last']} at "
                f"the last kill, all gone {r['gone_s']:.1f} s after it; "
                f"survivors "
                f"{len(r['failures']) or 'all'} "
                f"{'FAILED' if r['failures'] else 'verified'}; daemon rss "
                f"{H.mib(rss):.1f} MiB, {threads} threads")
            if kills >= a.kills:
                break
        t_storm = time.monotonic() - t0
        # Reclaim: every session gone, every counter back where it was.
        t_kill_end = time.monotonic()
        last = {}

        def reclaimed():
            last["c"] = d.counters()
            return last["c"] == baseline
        ok = H.wait_until(reclaimed, KILL_LEASE_S + 60, 0.25)
        drain_s = time.monotonic() - t_kill_end
        samples = sampler.stop()
    finally:
        sampler.stop()
    rss1, threads1 = d.proc_status()
    peak_threads = max(s[2] for s in samples)
    figures["kill SIGKILLs (waves x size)"] = (
        f"{kills} ({waves} x {a.wave}, {a.survivors} survivors each)")
    figures["kill sessions listed after their kill / at a wave's last"] = (
        f"{lingering} / {listed_at_last} (of {kills} kills; >= "
        f"{MIN_LEASED_SHARE:.0%} required)")
    figures["kill slowest READY after spawn (s)"] = (
        f"{ready_max:.1f} (limit {READY_WAIT_S})")
    figures["kill killed sessions gone after (max, s)"] = f"{gone_max:.1f}"
    figures["kill survivors' ops / reads verified"] = (
        f"{totals.get('ops', 0)} / {totals.get('verified', 0)}")
    figures["kill storm duration / final reclaim wait (s)"] = (
        f"{t_storm:.1f} / {drain_s:.1f}")
    figures["kill RSS before -> after (MiB)"] = (
        f"{H.mib(rss0):.1f} -> {H.mib(rss1):.1f} (peak "
        f"{H.mib(max(s[1] for s in samples)):.1f})")
    figures["kill threads before -> after (peak)"] = (
        f"{threads0} -> {threads1} ({peak_threads})")
    if failures:
        H.fail(f"kill: {len(failures)} failures:\n" + "\n".join(failures[:10]))
    if kills < a.kills:
        H.fail(f"kill: only {kills} of {a.kills} clients were alive to kill")
    if lingering < MIN_LEASED_SHARE * kills:
        H.fail(f"kill: only {lingering} of {kills} killed clients left a "
               f"session listed after their kill (want >= "
               f"{MIN_LEASED_SHARE:.0%}): the storm killed clients that held "
               "no session")
    if not ok:
        diff = {k: (baseline.get(k), v) for k, v in last["c"].items()
                if baseline.get(k) != v}
        H.fail(f"kill: counters not back after {drain_s:.1f} s "
               f"(name: (before, now)): {diff}; sessions: {d.sessions()}")
    LOG(f"kill: every session gone and every counter back in {drain_s:.1f} s")
    bound = thread_bound(threads0, os.cpu_count())
    if threads1 > bound:
        H.fail(f"kill: {threads1} threads after the storm, over {bound}")
    # During a wave, up to its killed sessions are torn down at once.
    peak_bound = thread_bound(threads0, os.cpu_count(), a.wave)
    if peak_threads > peak_bound:
        H.fail(f"kill: {peak_threads} threads during the storm, over "
               f"{peak_bound}")
    if rss1 > rss0 + RSS_TOLERANCE_KIB:
        H.fail(f"kill: RSS grew from {H.mib(rss0):.1f} to {H.mib(rss1):.1f} "
               f"MiB over the storm (tolerance "
               f"{H.mib(RSS_TOLERANCE_KIB):.0f} MiB)")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("phase", nargs="?", default="all",
                    choices=["load", "kill", "all"])
    ap.add_argument("--short", action="store_true",
                    help="the CI version (about a minute on 2 cores)")
    ap.add_argument("--bin_dir", default="bazel-out/k8-opt/bin")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clients", type=int, help="load: concurrent processes")
    ap.add_argument("--rounds", type=int, help="load: clients per slot")
    ap.add_argument("--ops", type=int, help="load: operations per client")
    ap.add_argument("--kills", type=int, help="kill: SIGKILLs in all")
    ap.add_argument("--wave", type=int, help="kill: clients per wave")
    ap.add_argument("--survivors", type=int, help="kill: unkilled per wave")
    ap.add_argument("--survivor_ops", type=int, default=1000)
    ap.add_argument("--pace_us", type=int, default=300,
                    help="kill: sleep between operations")
    ap.add_argument("--kill_window_s", type=float, default=1.5,
                    help="kill: the latest kill after a client's READY")
    ap.add_argument("--deadline_s", type=float, help="the whole run")
    ap.add_argument("--quiet_samples", action="store_true",
                    help="print RSS/thread samples only in the summary")
    a = ap.parse_args()
    # Long: the figures; short: the CI test command's.
    preset = (dict(clients=8, rounds=3, ops=4000, kills=100, wave=25,
                   survivors=5, deadline_s=240) if a.short else
              dict(clients=64, rounds=3, ops=10000, kills=1000, wave=100,
                   survivors=20, deadline_s=3000))
    for k, v in preset.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if not 0 <= a.survivors < a.wave:
        ap.error("--survivors must be below --wave")
    # Each client holds one connection (one daemon descriptor); keep room
    # for the daemon's own and the driver's.
    room = H.fd_limit() - 128
    if max(a.clients, a.wave) > room:
        ap.error(f"ulimit -n {H.fd_limit()} allows {room} clients at once")
    a.bin_dir = os.path.abspath(a.bin_dir)
    return a


def main():
    a = parse_args()
    H.install_signal_cleanup()
    deadline = Deadline(a.deadline_s)
    figures = {}
    t0 = time.monotonic()
    status = 0
    d = None
    try:
        d = H.Daemon(a.bin_dir)
        rss, threads = d.proc_status()
        figures["daemon idle RSS (MiB) / threads"] = (
            f"{H.mib(rss):.1f} / {threads} {d.thread_names()}")
        if a.phase in ("load", "all"):
            phase_load(d, a, figures, deadline)
        if a.phase in ("kill", "all"):
            phase_kill(d, a, figures, deadline)
        code = d.stop()
        if code != 0:
            H.fail(f"gpustreamd exited {code} on SIGTERM:\n{d.log_tail()}")
    except H.SoakFailure as e:
        LOG(f"FAIL: {e}")
        status = 1
    except BaseException:
        status = 1
        raise
    finally:
        if d is not None:
            d.remove_dir(status == 0)
    figures["total duration (s)"] = f"{time.monotonic() - t0:.1f}"
    LOG("\n== soak figures" + (" (short)" if a.short else ""))
    width = max(len(k) for k in figures)
    for k, v in figures.items():
        LOG(f"  {k:<{width}}  {v}")
    LOG("PASS" if status == 0 else "FAILED")
    return status


if __name__ == "__main__":
    sys.exit(main())
