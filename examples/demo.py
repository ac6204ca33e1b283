"""The demo job in Python: drives a running gpustreamd through the gpustream
package and checks every result it reads back (as examples/demo.cc does).
Exit status 0 means all checks passed.

    bazel run //examples:demo_py -- --target=unix:/tmp/gpustreamd.sock
"""

from __future__ import annotations

import argparse
import os
import struct
import sys

import grpc

import gpustream
from gpustream.v1 import gpustream_pb2 as pb


def kind_name(kind: int) -> str:
    return pb.ParamKind.Name(kind)[len("PARAM_KIND_"):]


def check(condition: bool, what: str) -> None:
    if not condition:
        print(f"demo: check failed: {what}", file=sys.stderr)
        sys.exit(1)


def run(target: str, n: int, token: str = "",
        tls_ca: str = "") -> None:
    block = 256
    grid = (n + block - 1) // block

    root_certificates = None
    if tls_ca:
        with open(tls_ca, "rb") as pem:
            root_certificates = pem.read()
    with gpustream.connect(target, token=token or None,
                           root_certificates=root_certificates) as client:
        info = client.server_info()
        print(f"connected: gpustreamd {info.server_version}, protocol "
              f"v{client.protocol_version}, backends "
              f"[{', '.join(info.backends)}]")
        for d in client.list_devices():
            print(f"device {d.id}: {d.name} ({d.backend}, {d.arch}), "
                  f"{d.free_memory_bytes >> 20} MiB free of "
                  f"{d.total_memory_bytes >> 20} MiB")
        for m in client.list_modules():
            for k in m.kernels:
                params = ", ".join(kind_name(p) for p in k.params)
                print(f"kernel {m.name}.{k.name}({params})")

        with client.open_session(client_name="demo.py") as s:
            print(f"session {s.public_id} opened")

            # 1. Two producer queues fill a and b; the consumer waits on both
            #    events, adds, then runs saxpy: a = 0.5 * c + a.
            a, b, c = (s.allocate(n * 4) for _ in range(3))
            qa, qb = s.create_queue(), s.create_queue()
            consumer = s.default_queue

            def bits(f: float) -> int:
                return struct.unpack("<I", struct.pack("<f", f))[0]

            qa.launch("samples", "fill_u32", grid, block, a, bits(1.5), n)
            qb.launch("samples", "fill_u32", grid, block, b, bits(2.25), n)
            a_ready, b_ready = qa.record_event(), qb.record_event()
            consumer.wait_for(a_ready)
            consumer.wait_for(b_ready)
            start = consumer.record_event(enable_timing=True)
            consumer.launch("samples", "vector_add_f32", grid, block, a, b, c,
                            n)
            consumer.launch("samples", "saxpy_f32", grid, block, 0.5, c, a, n)
            end = consumer.record_event(enable_timing=True)
            consumer.synchronize()
            want = 0.5 * (1.5 + 2.25) + 1.5
            try:
                import numpy
                result = a.read(dtype=numpy.float32)
                wrong = int((result != numpy.float32(want)).sum())
                first = float(result[0])
            except ImportError:  # Works without numpy too.
                values = struct.unpack(f"<{n}f", a.read())
                wrong = sum(v != want for v in values)
                first = values[0]
            ms = start.elapsed_ms(end)
            print(f"vector_add + saxpy on {n} floats: a[0] = {first:g} (want "
                  f"{want:g}), {wrong} wrong, {ms:.3f} ms on the device")
            check(wrong == 0, "vector_add + saxpy results")

            # 2. A completion flag gates work: the counter must not move until
            #    the host signals, then moves exactly once.
            counter = s.allocate(8)
            go, done = s.create_flag(), s.create_flag()
            gated = s.create_queue()
            gated.wait_for_host_value(go, 1)
            gated.launch("samples", "add_u64", 1, 1, counter, 42)
            gated.write_flag(done, 7)

            def load() -> int:
                return struct.unpack("<Q", consumer.read(counter))[0]

            before = load()
            go.signal(1)
            done.wait(7, timeout=10)
            after = struct.unpack("<Q", gated.read(counter))[0]
            print(f"flag-gated add_u64: counter {before} before signal, "
                  f"{after} after")
            check(before == 0 and after == 42, "flag-gated add_u64")

            # 3. A host function runs between two kernels of a queue.
            log = []
            gated.launch("samples", "add_u64", 1, 1, counter, 1)
            gated.enqueue_host_func(lambda: log.append("host function ran"))
            gated.launch("samples", "add_u64", 1, 1, counter, 1)
            gated.synchronize()
            final = struct.unpack("<Q", gated.read(counter))[0]
            print(f"{log[0] if log else 'host function MISSING'}; counter now "
                  f"{final}")
            check(log == ["host function ran"] and final == 44,
                  "host function between kernels")

            # 4. Bad input is rejected with a clear error and nothing breaks:
            #    here before it is sent (a float for a U32 parameter), and by
            #    the daemon (a grid beyond the device's limit), reported by
            #    the queue's next synchronize.
            try:
                consumer.launch("samples", "fill_u32", grid, block, a, 1.0, n)
                check(False, "a float for a U32 parameter was accepted")
            except gpustream.Error as error:
                print(f"a launch with a wrong argument kind: {error}")
                check(error.code == grpc.StatusCode.INVALID_ARGUMENT,
                      "INVALID_ARGUMENT for a wrong argument kind")
            consumer.launch("samples", "fill_u32", 1 << 31, 1, a, 1, n)
            try:
                consumer.synchronize()
                check(False, "a grid beyond the device limit was accepted")
            except gpustream.Error as error:
                print(f"a launch beyond the device's grid limit: {error}")
                check(error.code == grpc.StatusCode.OUT_OF_RANGE,
                      "OUT_OF_RANGE for a grid beyond the device limit")
            consumer.synchronize()
    print("demo: all checks passed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="unix:/tmp/gpustreamd.sock",
                        help="the daemon: unix:/path or host:port")
    parser.add_argument("--n", type=int, default=1 << 20,
                        help="elements per vector")
    parser.add_argument("--token", default=os.environ.get("GPUSTREAM_TOKEN", ""),
                        help="bearer token (default: $GPUSTREAM_TOKEN)")
    parser.add_argument("--tls_ca", default="",
                        help="PEM file of the CA that signed the daemon's "
                        "certificate: turns on TLS")
    args = parser.parse_args()
    try:
        run(args.target, args.n, args.token, args.tls_ca)
    except gpustream.Error as error:
        print(f"demo: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
