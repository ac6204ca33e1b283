"""What the Python client costs per launch against a running gpustreamd.

Measures, on one session:
  - pipelined launches/s: N `samples.noop` launches enqueued back to back,
    then one synchronize (the enqueue rate is reported separately);
  - enqueue -> start latency: the time from `launch` returning to the
    kernel starting on the device, measured with a flag the queue writes
    right before the kernel (`write_flag` then `launch`); the host polls it
    with `Flag.wait`, so the figure includes one notification round trip;
  - synchronize round trip on an idle queue;
  - the data plane (--data_mib, 256 MiB): inline write and read through
    the client against numpy's copy of the same size, and, where the
    daemon serves a share socket, a copy from a HOST_SHARED buffer the
    client filled through its mapping into DEVICE memory.

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


def best_of_three(fn) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def data_plane(session: gpustream.Session, queue: gpustream.Queue,
               mib: int) -> None:
    import numpy as np  # pylint: disable=import-outside-toplevel
    size = mib << 20
    src = np.full(size, 7, dtype=np.uint8)
    dst = np.empty_like(src)
    copy_mb_s = size / best_of_three(lambda: np.copyto(dst, src)) / 1e6
    print(f"numpy copy of {mib} MiB (the floor): {copy_mb_s:,.0f} MB/s")
    device = session.allocate(size)

    def row(what: str, seconds: float, goal: float) -> None:
        mb_s = size / seconds / 1e6
        print(f"{what}: {mb_s:,.0f} MB/s ({mb_s / copy_mb_s:.2f}x the "
              f"copy; goal >= {goal}x)")

    def write() -> None:
        queue.write(device, src)
        queue.synchronize()

    row(f"write {mib} MiB + synchronize", best_of_three(write), 0.3)
    row(f"read {mib} MiB", best_of_three(lambda: queue.read(device)), 0.3)
    try:
        shared = session.allocate_shared(size)
    except gpustream.Error as e:
        print(f"HOST_SHARED copy: skipped ({e})")
        return
    shared.array()[:] = 7

    def copy() -> None:
        queue.copy(shared, device)
        queue.synchronize()

    row(f"copy {mib} MiB HOST_SHARED -> DEVICE + synchronize",
        best_of_three(copy), 0.9)


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
    parser.add_argument("--data_mib", type=int, default=256,
                        help="MiB per data-plane figure; 0 skips them")
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
            if args.data_mib > 0:
                data_plane(session, queue, args.data_mib)


if __name__ == "__main__":
    main()
