"""What the Python client costs per launch against a running gpustreamd.

Measures, on one session:
  - pipelined launches/s: N `samples.noop` launches enqueued back to back,
    then one synchronize (the enqueue rate is reported separately);
  - enqueue -> start latency: the time from `launch` returning to the
    kernel starting on the device, measured with a flag the queue writes
    right before the kernel (`write_flag` then `launch`); the host polls it
    with `Flag.wait`, so the figure includes one notification round trip;
  - synchronize round trip on an idle queue.

    bazel run //bench:python_launch_bench -- --target=unix:/tmp/gpustreamd.sock
"""

from __future__ import annotations

import argparse
import statistics
import time

import gpustream


def launches_per_second(queue: gpustream.Queue, n: int) -> tuple:
    queue.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        queue.launch("samples", "noop", 1, 1)
    enqueued = time.perf_counter()
    queue.synchronize()
    done = time.perf_counter()
    return n / (enqueued - start), n / (done - start)


def enqueue_to_start_us(session: gpustream.Session, queue: gpustream.Queue,
                        rounds: int) -> list:
    """Per round: launch returns at t0; the queue stores the round number
    into a flag as the kernel's predecessor completes, which the host sees
    through a blocking wait. Latency = time until that wait returns."""
    flag = session.create_flag()
    queue.synchronize()
    samples = []
    for i in range(1, rounds + 1):
        t0 = time.perf_counter()
        queue.write_flag(flag, i)
        queue.launch("samples", "noop", 1, 1)
        flag.wait(i, timeout=10)
        samples.append((time.perf_counter() - t0) * 1e6)
    queue.synchronize()
    return samples


def sync_round_trip_us(queue: gpustream.Queue, rounds: int) -> list:
    queue.synchronize()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        queue.synchronize()
        samples.append((time.perf_counter() - t0) * 1e6)
    return samples


def describe(samples: list) -> str:
    ordered = sorted(samples)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return (f"median {statistics.median(ordered):.0f} us, p90 {p(0.9):.0f} "
            f"us, p99 {p(0.99):.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="unix:/tmp/gpustreamd.sock")
    parser.add_argument("--launches", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with gpustream.connect(args.target) as client:
        device = client.list_devices()[0]
        print(f"device 0: {device.name} ({device.backend})")
        with client.open_session(client_name="python_launch_bench") as session:
            queue = session.create_queue()
            launches_per_second(queue, 1000)  # Warm-up (and module cache).
            for r in range(args.repeats):
                enqueue_rate, total_rate = launches_per_second(queue,
                                                               args.launches)
                print(f"pipelined noop x{args.launches}: enqueue "
                      f"{enqueue_rate:,.0f} launches/s, end to end (through "
                      f"synchronize) {total_rate:,.0f} launches/s")
            print("enqueue -> start (write_flag + noop, host flag wait): "
                  + describe(enqueue_to_start_us(session, queue, args.rounds)))
            print("synchronize on an idle queue: "
                  + describe(sync_round_trip_us(queue, args.rounds)))


if __name__ == "__main__":
    main()
